package kafkaclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// SASL mechanisms the clients speak.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// TLSConfig says how clients reach the brokers over TLS.
type TLSConfig struct {
	// Enabled turns TLS on. The other fields need it.
	Enabled bool
	// CAFile is a PEM bundle of the authorities that sign the brokers'
	// certificates; empty uses the system's.
	CAFile string
	// CertFile and KeyFile are the client's own certificate and key (PEM)
	// for brokers that require client authentication; both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked against the brokers'
	// certificates (default: the host of each broker address).
	ServerName string
	// InsecureSkipVerify accepts any broker certificate: for development
	// only.
	InsecureSkipVerify bool
}

// SASLConfig says how clients authenticate to the brokers.
type SASLConfig struct {
	// Mechanism is "" (no SASL), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	// (case-insensitive).
	Mechanism string
	Username  string
	Password  string
	// AllowPlaintext lets PLAIN run without TLS, where it sends the
	// password in clear to anyone on the path (development only; default
	// false: refused by Validate).
	AllowPlaintext bool
}

// Security is what every Kafka client of a process needs beyond the
// broker addresses.
type Security struct {
	TLS  TLSConfig
	SASL SASLConfig
}

// Enabled reports whether s asks for TLS or SASL.
func (s Security) Enabled() bool { return s.TLS.Enabled || s.SASL.Mechanism != "" }

// Validate checks s without reading any file.
func (s Security) Validate() error {
	t := s.TLS
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify) {
		return errors.New("kafka.tls: ca_file, cert_file, key_file, server_name and insecure_skip_verify need kafka.tls.enabled: true")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("kafka.tls: cert_file and key_file go together: set both or neither")
	}
	switch strings.ToUpper(s.SASL.Mechanism) {
	case "":
		if s.SASL.Username != "" || s.SASL.Password != "" {
			return errors.New("kafka.sasl: username and password are set but kafka.sasl.mechanism is empty; want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.SASL.Username == "" {
			return fmt.Errorf("kafka.sasl: mechanism %s needs kafka.sasl.username", strings.ToUpper(s.SASL.Mechanism))
		}
		if strings.ToUpper(s.SASL.Mechanism) == SASLPlain && !t.Enabled && !s.SASL.AllowPlaintext {
			return errors.New("kafka.sasl.mechanism PLAIN without kafka.tls.enabled: true would send the password in clear; " +
				"turn TLS on (kafka.tls.enabled: true), or use SCRAM-SHA-256 or SCRAM-SHA-512, or set kafka.sasl.allow_plaintext: true (development only)")
		}
	default:
		return fmt.Errorf("kafka.sasl.mechanism is %q; want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.SASL.Mechanism)
	}
	return nil
}

// TLSClientConfig builds the client TLS configuration (nil when TLS is
// off), reading the CA and key files.
func (s Security) TLSClientConfig() (*tls.Config, error) {
	t := s.TLS
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // an explicit development option
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka.tls.ca_file %s: no PEM certificate in it", t.CAFile)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.cert_file/key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Mechanism builds the SASL mechanism (nil when SASL is off).
func (s Security) Mechanism() (sasl.Mechanism, error) {
	switch strings.ToUpper(s.SASL.Mechanism) {
	case "":
		return nil, nil
	case SASLPlain:
		return plain.Mechanism{Username: s.SASL.Username, Password: s.SASL.Password}, nil
	case SASLScramSHA256:
		m, err := scram.Mechanism(scram.SHA256, s.SASL.Username, s.SASL.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka.sasl: SCRAM-SHA-256: %w", err)
		}
		return m, nil
	case SASLScramSHA512:
		m, err := scram.Mechanism(scram.SHA512, s.SASL.Username, s.SASL.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka.sasl: SCRAM-SHA-512: %w", err)
		}
		return m, nil
	}
	return nil, s.Validate()
}

// Dialer builds the kafka-go dialer every client of a process uses: nil
// when s is empty (kafka-go's defaults), else one with TLS and SASL set.
func (s Security) Dialer() (*kafka.Dialer, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if !s.Enabled() {
		return nil, nil
	}
	tc, err := s.TLSClientConfig()
	if err != nil {
		return nil, err
	}
	m, err := s.Mechanism()
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: tc, SASLMechanism: m}, nil
}

// Transport returns a kafka-go Transport (for Writers and Clients) that
// dials like d; nil d gives kafka-go's default transport settings.
func Transport(d *kafka.Dialer, clientID string) *kafka.Transport {
	tr := &kafka.Transport{ClientID: clientID}
	if d != nil {
		tr.TLS = d.TLS
		tr.SASL = d.SASLMechanism
		if d.Timeout > 0 {
			tr.DialTimeout = d.Timeout
		}
	}
	return tr
}
