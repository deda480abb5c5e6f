// Package devbroker runs an in-memory, single-process Kafka-protocol broker
// (franz-go's kfake) for the demo, the tests and development without Docker.
// It keeps nothing on disk: everything is gone when the process exits.
package devbroker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sagaflow/sagaflow/internal/faultproxy"
)

// Config says where to listen and how topics are created.
type Config struct {
	// Addr is host:port to listen on; port 0 (or empty Addr) picks a free
	// port on 127.0.0.1.
	Addr string
	// Partitions for auto-created topics. Default 4.
	Partitions int
	// Topics to create at start.
	Topics []string
	// AdvertiseAddr, if set, is the host:port the broker tells clients to
	// connect to (in metadata and coordinator answers) instead of its own
	// listener: put a proxy (faultproxy) there and every client connection
	// goes through it. Addrs then returns AdvertiseAddr.
	AdvertiseAddr string
	// SASL, when Mechanism is set (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512),
	// makes every client authenticate as User with Password.
	SASL SASL
	// TLSCertFile and TLSKeyFile (PEM), when set, make the broker speak TLS
	// only.
	TLSCertFile, TLSKeyFile string
	// Principals, when set, make the broker enforce ACLs (SASL required):
	// each is a user of SASL.Mechanism allowed only what its ACLs say
	// (SagaflowACLs gives a deployment's); SASL.User stays a superuser, for
	// the operator's tools.
	Principals []Principal
}

// SASL is the one user of a broker with authentication.
type SASL struct {
	Mechanism, User, Password string
}

// Broker is a running embedded broker.
type Broker struct {
	c *kfake.Cluster
	// responses counts the answers written to clients (see Responses).
	responses *atomic.Int64
}

// Start starts a broker and returns once it accepts connections.
func Start(cfg Config) (*Broker, error) {
	parts := cfg.Partitions
	if parts <= 0 {
		parts = 4
	}
	port := 0
	if cfg.Addr != "" {
		_, p, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("devbroker: addr %q: %w", cfg.Addr, err)
		}
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("devbroker: addr %q: port: %w", cfg.Addr, err)
		}
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(parts),
		// kafka-go's group consumers use short session timeouts in tests.
		kfake.GroupMinSessionTimeout(0),
	}
	responses := new(atomic.Int64)
	adv := cfg.AdvertiseAddr
	opts = append(opts, kfake.ListenFn(func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		ln = &countingListener{Listener: ln, n: responses}
		if adv == "" {
			return ln, nil
		}
		wrapped, err := faultproxy.AdvertisedListener(ln, adv)
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		return wrapped, nil
	}))
	if len(cfg.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(parts), cfg.Topics...))
	}
	if m := strings.ToUpper(cfg.SASL.Mechanism); m != "" {
		switch m {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return nil, fmt.Errorf("devbroker: SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", cfg.SASL.Mechanism)
		}
		if cfg.SASL.User == "" || cfg.SASL.Password == "" {
			return nil, errors.New("devbroker: SASL needs a user and a password")
		}
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(m, cfg.SASL.User, cfg.SASL.Password))
		if len(cfg.Principals) > 0 {
			opts = append(opts, kfake.EnableACLs())
		}
		for _, p := range cfg.Principals {
			if p.User == "" || p.Password == "" || p.User == cfg.SASL.User {
				return nil, fmt.Errorf("devbroker: principal %q: needs a user (not the superuser %q) and a password", p.User, cfg.SASL.User)
			}
			acls, err := p.kfakeACLs()
			if err != nil {
				return nil, err
			}
			opts = append(opts, kfake.User(m, p.User, p.Password, acls...))
		}
	} else if len(cfg.Principals) > 0 {
		return nil, errors.New("devbroker: principals (ACLs) need SASL: set a mechanism, user and password")
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("devbroker: TLS certificate and key: %w", err)
		}
		opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("devbroker: start: %w", err)
	}
	return &Broker{c: c, responses: responses}, nil
}

// Responses is the number of answers the broker has written to its clients
// so far: one per request (kfake writes each answer with one Write; acks=0
// produce requests, which sagaflow does not send, get none). The benchmark
// reads it as the count of Kafka requests.
func (b *Broker) Responses() int64 { return b.responses.Load() }

// countingListener counts the Writes on the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// Addrs are the bootstrap addresses (host:port) of the broker.
func (b *Broker) Addrs() []string { return b.c.ListenAddrs() }

// Close stops the broker; safe to call twice.
func (b *Broker) Close() { b.c.Close() }
