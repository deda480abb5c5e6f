package conformance_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants/conformance"
)

// These tests drive the Node.js participant as a process of its own. They
// are not parallel: TestKitNodeParticipant (parallel, so it runs after
// them) reinstalls node_modules with npm ci, which would pull the modules
// from under a running participant.

var nodeDepsOnce struct {
	sync.Once
	err error
	out []byte
}

// nodeDeps checks node and npm are there and installs the participant's
// locked dependencies once.
func nodeDeps(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s is not on PATH: %v", tool, err)
		}
	}
	nodeDepsOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		npm := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		npm.Dir = nodeDir
		nodeDepsOnce.out, nodeDepsOnce.err = npm.CombinedOutput()
	})
	if nodeDepsOnce.err != nil {
		unavailable(t, "npm ci in %s: %v\n%s", nodeDir, nodeDepsOnce.err, nodeDepsOnce.out)
	}
}

// nodeProc is a running `node index.js`.
type nodeProc struct {
	cmd    *exec.Cmd
	out    *testkit.Output
	exited chan struct{}
	err    error // once exited is closed
}

// startNode starts the participant with env added to this process's
// environment (SAGAFLOW_* variables of this process removed); it is
// stopped when the test ends.
func startNode(t *testing.T, env ...string) *nodeProc {
	t.Helper()
	cmd := exec.Command("node", "index.js")
	cmd.Dir = nodeDir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SAGAFLOW_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &nodeProc{cmd: cmd, out: &testkit.Output{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(12 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
	return p
}

// wait waits up to timeout for the process to exit and returns its exit
// error (nil: status 0).
func (p *nodeProc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("the participant still runs after %s; its output:\n%s", timeout, p.out.String())
		return nil
	}
}

// stop sends SIGTERM and requires exit status 0 within 15s.
func (p *nodeProc) stop(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	if err := p.wait(t, 15*time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit status 0; output:\n%s", err, p.out.String())
	}
}

// requireRefused requires the participant to exit with a non-zero status
// within a minute and its output to contain every one of want.
func requireRefused(t *testing.T, p *nodeProc, want ...string) {
	t.Helper()
	err := p.wait(t, time.Minute)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("exit %v, want a non-zero exit status; output:\n%s", err, p.out.String())
	}
	out := p.out.String()
	for _, w := range want {
		if !strings.Contains(strings.ToLower(out), strings.ToLower(w)) {
			t.Errorf("output does not name %q:\n%s", w, out)
		}
	}
}

// secured is a kfake broker speaking TLS (a CA made for the test) with
// SASL, for the Node.js participant.
type secured struct {
	brokers []string
	// sec is what Go clients need to reach it.
	sec   kafkaclient.Security
	files testkit.TLSFiles
	ln    *brokerListener
}

// securedBroker starts a kfake broker on which a connection speaks TLS and
// authenticates as user with mechanism and password.
//
// kfake answers a SaslHandshake it accepts with an empty mechanism list
// (Kafka lists the enabled ones), and kafkajs refuses a mechanism missing
// from that list; so the broker's TLS connections go through
// mechanismsConn, which fills the list in. TLS is done in the listener (under
// that rewriting, not with kfake.TLS, which would wrap it).
//
// With kitPlain, a connection that does not start with a TLS handshake is
// taken as plain TCP and authenticated on its client's behalf (SASL PLAIN
// as a second superuser, requests injected ahead of the client's): the
// conformance kit's own Go clients dial plain TCP without SASL
// (conformance.Config has no dialer), while the participant's connections
// are TLS with its own SASL exchange.
func securedBroker(t *testing.T, mechanism, user, password string, kitPlain bool) secured {
	t.Helper()
	files := testkit.MakeTLSFiles(t)
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	bl := &brokerListener{tls: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, mechanisms: []string{mechanism}}
	opts := []kfake.Opt{
		kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4),
		kfake.GroupMinSessionTimeout(0), kfake.EnableSASL(), kfake.Superuser(mechanism, user, password),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err != nil {
				return nil, err
			}
			bl.Listener = ln
			return bl, nil
		}),
	}
	if kitPlain {
		bl.plainUser, bl.plainPassword = "kit", "kit-"+testkit.RandomSuffix(8)
		opts = append(opts, kfake.Superuser(kafkaclient.SASLPlain, bl.plainUser, bl.plainPassword))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("start secured broker: %v", err)
	}
	t.Cleanup(c.Close)
	return secured{
		brokers: c.ListenAddrs(), files: files, ln: bl,
		sec: kafkaclient.Security{
			TLS:  kafkaclient.TLSConfig{Enabled: true, CAFile: files.CA},
			SASL: kafkaclient.SASLConfig{Mechanism: mechanism, Username: user, Password: password},
		},
	}
}

// brokerListener is the broker's listener: see securedBroker.
type brokerListener struct {
	net.Listener
	tls                      *tls.Config
	mechanisms               []string
	plainUser, plainPassword string // kitPlain
	// tlsHandshakes counts the SaslHandshakes answered on TLS connections;
	// plainFailed the injected authentications kfake refused.
	tlsHandshakes, plainFailed atomic.Int64
}

func (l *brokerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, l: l}, nil
}

// sniffConn decides on its first read (kfake reads before it writes)
// whether its client speaks TLS (a handshake record starts with 0x16; a
// Kafka request with the high byte of its size, 0).
type sniffConn struct {
	net.Conn // the TCP connection
	l        *brokerListener
	once     sync.Once
	conn     net.Conn
	err      error
}

func (c *sniffConn) decide() error {
	c.once.Do(func() {
		first := make([]byte, 1)
		if _, c.err = io.ReadFull(c.Conn, first); c.err != nil {
			return
		}
		pc := &prefixConn{Conn: c.Conn, prefix: first}
		switch {
		case first[0] == 0x16:
			c.conn = &mechanismsConn{Conn: tls.Server(pc, c.l.tls), l: c.l, pending: map[int32]bool{}}
		case c.l.plainUser != "":
			c.conn = &injectConn{Conn: pc, l: c.l, pre: plainAuthRequests(c.l.plainUser, c.l.plainPassword)}
		default:
			c.conn = pc
		}
	})
	return c.err
}

func (c *sniffConn) Read(p []byte) (int, error) {
	if err := c.decide(); err != nil {
		return 0, err
	}
	return c.conn.Read(p)
}

func (c *sniffConn) Write(b []byte) (int, error) {
	if err := c.decide(); err != nil {
		return 0, err
	}
	return c.conn.Write(b)
}

// prefixConn reads prefix before the connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// The correlation ids of the injected requests (kafka-go counts up from 0).
const injectedHandshake, injectedAuthenticate int32 = -7001, -7002

// plainAuthRequests are a SaslHandshake v1 (PLAIN) and a SaslAuthenticate
// v0 request as the client would send them, each framed with its size.
func plainAuthRequests(user, password string) []byte {
	str := func(b []byte, s string) []byte { return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...) }
	frame := func(out, req []byte) []byte {
		return append(binary.BigEndian.AppendUint32(out, uint32(len(req))), req...)
	}
	header := func(key, version int16, corr int32) []byte {
		h := binary.BigEndian.AppendUint16(nil, uint16(key))
		h = binary.BigEndian.AppendUint16(h, uint16(version))
		h = binary.BigEndian.AppendUint32(h, uint32(corr))
		return str(h, "node-secure-test-kit")
	}
	hs := str(header(17, 1, injectedHandshake), kafkaclient.SASLPlain)
	creds := "\x00" + user + "\x00" + password
	au := append(binary.BigEndian.AppendUint32(header(36, 0, injectedAuthenticate), uint32(len(creds))), creds...)
	return frame(frame(nil, hs), au)
}

// injectConn is a plain connection authenticated on its client's behalf:
// kfake reads the injected requests first; their answers are not passed on.
type injectConn struct {
	net.Conn
	l   *brokerListener
	pre []byte
}

func (c *injectConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *injectConn) Write(b []byte) (int, error) {
	if len(b) >= 10 {
		if corr := int32(binary.BigEndian.Uint32(b[4:])); corr == injectedHandshake || corr == injectedAuthenticate {
			if binary.BigEndian.Uint16(b[8:]) != 0 {
				c.l.plainFailed.Add(1)
			}
			return len(b), nil
		}
	}
	return c.Conn.Write(b)
}

// mechanismsConn is the broker's side of a TLS connection: it notes the
// correlation ids of the SaslHandshake requests it reads (API key 17) and
// rewrites their successful answers (kfake writes each answer with one
// Write) to list the mechanisms.
type mechanismsConn struct {
	net.Conn
	l       *brokerListener
	mu      sync.Mutex
	in      []byte // request bytes read and not yet framed
	pending map[int32]bool
}

func (c *mechanismsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in = append(c.in, p[:n]...)
	for len(c.in) >= 4 {
		size := int(binary.BigEndian.Uint32(c.in))
		if len(c.in) < 4+size {
			break
		}
		if frame := c.in[4 : 4+size]; size >= 8 && binary.BigEndian.Uint16(frame) == 17 {
			c.pending[int32(binary.BigEndian.Uint32(frame[4:]))] = true
		}
		c.in = c.in[4+size:]
	}
	if len(c.in) == 0 {
		c.in = nil // do not keep a large request's buffer
	}
	return n, err
}

func (c *mechanismsConn) Write(b []byte) (int, error) {
	if len(b) < 8 {
		return c.Conn.Write(b)
	}
	corr := int32(binary.BigEndian.Uint32(b[4:]))
	c.mu.Lock()
	handshake := c.pending[corr]
	delete(c.pending, corr)
	c.mu.Unlock()
	// v1 answer: size, correlation id, error code (int16), mechanisms
	// (int32 count, then int16-length strings); rewritten when it is a
	// success with no mechanism listed.
	if !handshake || len(b) != 14 || binary.BigEndian.Uint16(b[8:]) != 0 || binary.BigEndian.Uint32(b[10:]) != 0 {
		return c.Conn.Write(b)
	}
	out := append([]byte{}, b[:10]...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(c.l.mechanisms)))
	for _, m := range c.l.mechanisms {
		out = binary.BigEndian.AppendUint16(out, uint16(len(m)))
		out = append(out, m...)
	}
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	c.l.tlsHandshakes.Add(1)
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// TestKitNodeParticipantSecuredKafka runs the kit against the Node.js
// participant as TestKitNodeParticipant does, on a broker where the
// participant speaks TLS (the test's CA) and SCRAM-SHA-256: every check
// passes, its connections went through TLS, and its output never shows
// the password. (The kit's own clients reach the same broker over plain
// TCP, authenticated by the test's listener: see securedBroker.)
func TestKitNodeParticipantSecuredKafka(t *testing.T) {
	nodeDeps(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	password := "pw-" + testkit.RandomSuffix(8)
	b := securedBroker(t, kafkaclient.SASLScramSHA256, "saga", password, true)
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	command := strings.Join([]string{
		"SAGAFLOW_KAFKA_TLS_ENABLED=true", "SAGAFLOW_KAFKA_TLS_CA_FILE=" + quote(b.files.CA),
		"SAGAFLOW_KAFKA_SASL_MECHANISM=SCRAM-SHA-256", "SAGAFLOW_KAFKA_SASL_USERNAME=saga",
		"SAGAFLOW_KAFKA_SASL_PASSWORD=" + quote(password), "exec node examples/node-participant/index.js",
	}, " ")
	var out testkit.Output
	rep, err := conformance.Verify(testkit.Context(t, 5*time.Minute), conformance.Config{
		Participant: "secured_" + testkit.RandomSuffix(3), Command: command, Dir: root, DatabaseURL: testkit.AdminURL(),
		Brokers: b.brokers, Partitioner: conformance.PartitionerMurmur2, Output: &out,
	})
	if err != nil {
		t.Fatalf("kit: %v\nparticipant output:\n%s", err, out.String())
	}
	var buf strings.Builder
	_ = rep.WriteText(&buf)
	t.Logf("kit against the Node.js participant over TLS+SASL:\n%s", buf.String())
	if !rep.OK() {
		t.Logf("participant output:\n%s", out.String())
	}
	requireAllPassed(t, rep)
	if n := b.ln.tlsHandshakes.Load(); n == 0 {
		t.Fatal("no SASL handshake on a TLS connection: the participant did not connect over TLS")
	}
	if n := b.ln.plainFailed.Load(); n > 0 {
		t.Fatalf("%d of the kit's connections failed to authenticate", n)
	}
	if strings.Contains(out.String(), password) {
		t.Fatalf("the participant's output contains the SASL password:\n%s", out.String())
	}
}

// TestNodeParticipantSecuredKafka runs the Node.js participant against a
// broker that speaks TLS only and wants SCRAM-SHA-512 (the kit's clients
// dial plain TCP, so a Go client with the same settings plays the
// orchestrator): a command produced over TLS+SASL is answered on the reply
// topic and its barrier row is in the participant's schema.
func TestNodeParticipantSecuredKafka(t *testing.T) {
	nodeDeps(t)
	const user = "saga"
	password := "pw-" + testkit.RandomSuffix(8)
	b := securedBroker(t, kafkaclient.SASLScramSHA512, user, password, false)
	brokers, files := b.brokers, b.files
	d, err := b.sec.Dialer()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 3*time.Minute)
	name := "secured_" + testkit.RandomSuffix(3)
	commands, replies := message.CommandTopic("", name), name+".replies"
	if err := kafkaclient.EnsureTopicsWith(ctx, d, brokers, 1, 1, commands, commands+".dlq", replies); err != nil {
		t.Fatalf("create topics over TLS+SASL: %v", err)
	}
	dbURL := testkit.Database(t)
	p := startNode(t,
		"SAGAFLOW_KAFKA_BROKERS="+strings.Join(brokers, ","), "SAGAFLOW_DATABASE_URL="+dbURL,
		"SAGAFLOW_PARTICIPANT="+name, "SAGAFLOW_REPLY_TOPIC="+replies, "SAGAFLOW_KAFKA_PARTITIONS=1",
		"SAGAFLOW_KAFKA_TLS_ENABLED=true", "SAGAFLOW_KAFKA_TLS_CA_FILE="+files.CA,
		"SAGAFLOW_KAFKA_SASL_MECHANISM=scram-sha-512", "SAGAFLOW_KAFKA_SASL_USERNAME="+user,
		"SAGAFLOW_KAFKA_SASL_PASSWORD="+password,
	)

	cmd, value := conformanceCommand(t, replies, "secured-1")
	tr := kafkaclient.Transport(d, "node-secure-test")
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{
		Addr: kafka.TCP(brokers...), Balancer: kafkaclient.Balancer(), RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Transport: tr,
	}
	defer w.Close()
	writeCommand(ctx, t, w, commands, cmd, value)

	// Read the reply topic until the answer comes, the participant exits
	// or 90 s pass.
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-rctx.Done():
		}
	}()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: replies, Partition: 0, Dialer: d, MinBytes: 1, MaxBytes: 1 << 20,
		MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
	})
	defer r.Close()
	var rep message.Reply
	for {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			t.Fatalf("no reply on %s: %v (participant exited: %v); its output:\n%s", replies, err, p.exitedErr(), p.out.String())
		}
		if rep, err = message.DecodeReply(m.Value); err == nil && rep.InReplyTo == cmd.MessageID {
			if string(m.Key) != cmd.SagaID.String() {
				t.Errorf("reply key %q, want the saga id %s", m.Key, cmd.SagaID)
			}
			break
		}
	}
	if rep.Outcome != message.Success || rep.SagaID != cmd.SagaID || rep.Action != message.Forward {
		t.Fatalf("reply %+v, want a forward success for saga %s", rep, cmd.SagaID)
	}
	var payload struct {
		Key     string `json:"key"`
		Effects int    `json:"effects"`
	}
	if err := json.Unmarshal(rep.Payload, &payload); err != nil || payload.Effects != 1 {
		t.Fatalf("reply payload %s (%v), want one effect", rep.Payload, err)
	}

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var outcome string
	if err := conn.QueryRow(ctx, `SELECT outcome FROM `+pgx.Identifier{name, "barrier"}.Sanitize()+
		` WHERE saga_id = $1 AND step = $2 AND action = 'forward'`, cmd.SagaID, conformance.StepName).Scan(&outcome); err != nil {
		t.Fatalf("barrier row of saga %s: %v", cmd.SagaID, err)
	}
	if outcome != "success" {
		t.Fatalf("barrier row outcome %q, want success", outcome)
	}
	p.stop(t)
	if strings.Contains(p.out.String(), password) {
		t.Fatalf("the participant's output contains the SASL password:\n%s", p.out.String())
	}
}

func (p *nodeProc) exitedErr() string {
	select {
	case <-p.exited:
		return fmt.Sprintf("yes, %v", p.err)
	default:
		return "no"
	}
}

// TestNodeParticipantWrongSASLPassword: against a TLS+SASL PLAIN broker, a
// wrong password makes the participant exit non-zero with the
// authentication failure, without printing the password.
func TestNodeParticipantWrongSASLPassword(t *testing.T) {
	nodeDeps(t)
	b := securedBroker(t, kafkaclient.SASLPlain, "saga", "right-"+testkit.RandomSuffix(6), false)
	brokers, files := b.brokers, b.files
	wrong := "wrong-" + testkit.RandomSuffix(6)
	p := startNode(t,
		"SAGAFLOW_KAFKA_BROKERS="+strings.Join(brokers, ","), "SAGAFLOW_DATABASE_URL="+testkit.Database(t),
		"SAGAFLOW_PARTICIPANT=wrongpw_"+testkit.RandomSuffix(3), "SAGAFLOW_KAFKA_PARTITIONS=1",
		"SAGAFLOW_KAFKA_TLS_ENABLED=true", "SAGAFLOW_KAFKA_TLS_CA_FILE="+files.CA,
		"SAGAFLOW_KAFKA_SASL_MECHANISM=PLAIN", "SAGAFLOW_KAFKA_SASL_USERNAME=saga", "SAGAFLOW_KAFKA_SASL_PASSWORD="+wrong,
	)
	requireRefused(t, p, "participant failed", "SASL PLAIN authentication failed")
	if strings.Contains(p.out.String(), wrong) {
		t.Fatalf("the output contains the password:\n%s", p.out.String())
	}
}

// TestNodeParticipantRefusesBadSettings: every bad TLS, SASL or retention
// setting stops the participant at start, with the variable named (before
// it connects to anything: the addresses here answer nothing).
func TestNodeParticipantRefusesBadSettings(t *testing.T) {
	nodeDeps(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := testkit.MakeTLSFiles(t)
	base := []string{
		"SAGAFLOW_KAFKA_BROKERS=" + testkit.FreeAddr(t), "SAGAFLOW_PARTICIPANT=refused",
		"SAGAFLOW_DATABASE_URL=postgres://postgres@" + testkit.FreeAddr(t) + "/postgres?sslmode=disable",
	}
	for _, c := range []struct {
		name string
		env  []string
		want []string
	}{
		{"unknown mechanism", []string{"SAGAFLOW_KAFKA_SASL_MECHANISM=GSSAPI", "SAGAFLOW_KAFKA_SASL_USERNAME=u", "SAGAFLOW_KAFKA_SASL_PASSWORD=p"},
			[]string{"SAGAFLOW_KAFKA_SASL_MECHANISM", "GSSAPI"}},
		{"mechanism without password", []string{"SAGAFLOW_KAFKA_SASL_MECHANISM=SCRAM-SHA-256", "SAGAFLOW_KAFKA_SASL_USERNAME=u"},
			[]string{"SAGAFLOW_KAFKA_SASL_PASSWORD"}},
		{"mechanism without username", []string{"SAGAFLOW_KAFKA_SASL_MECHANISM=plain", "SAGAFLOW_KAFKA_SASL_PASSWORD=p"},
			[]string{"SAGAFLOW_KAFKA_SASL_USERNAME"}},
		{"PLAIN without TLS", []string{"SAGAFLOW_KAFKA_SASL_MECHANISM=PLAIN", "SAGAFLOW_KAFKA_SASL_USERNAME=u", "SAGAFLOW_KAFKA_SASL_PASSWORD=p"},
			[]string{"SAGAFLOW_KAFKA_SASL_ALLOW_PLAINTEXT", "SAGAFLOW_KAFKA_TLS_ENABLED"}},
		{"credentials without mechanism", []string{"SAGAFLOW_KAFKA_SASL_USERNAME=u", "SAGAFLOW_KAFKA_SASL_PASSWORD=p"},
			[]string{"SAGAFLOW_KAFKA_SASL_MECHANISM"}},
		{"TLS flag not a boolean", []string{"SAGAFLOW_KAFKA_TLS_ENABLED=yes"}, []string{"SAGAFLOW_KAFKA_TLS_ENABLED"}},
		{"skip-verify flag not a boolean", []string{"SAGAFLOW_KAFKA_TLS_ENABLED=true", "SAGAFLOW_KAFKA_TLS_INSECURE_SKIP_VERIFY=sure"},
			[]string{"SAGAFLOW_KAFKA_TLS_INSECURE_SKIP_VERIFY"}},
		{"CA file unreadable", []string{"SAGAFLOW_KAFKA_TLS_ENABLED=true", "SAGAFLOW_KAFKA_TLS_CA_FILE=" + filepath.Join(dir, "missing.pem")},
			[]string{"SAGAFLOW_KAFKA_TLS_CA_FILE", "cannot read"}},
		{"CA file not PEM", []string{"SAGAFLOW_KAFKA_TLS_ENABLED=true", "SAGAFLOW_KAFKA_TLS_CA_FILE=" + notPEM},
			[]string{"SAGAFLOW_KAFKA_TLS_CA_FILE", "no PEM certificate"}},
		{"key file unreadable", []string{"SAGAFLOW_KAFKA_TLS_ENABLED=true", "SAGAFLOW_KAFKA_TLS_CERT_FILE=" + files.Cert,
			"SAGAFLOW_KAFKA_TLS_KEY_FILE=" + filepath.Join(dir, "missing-key.pem")}, []string{"SAGAFLOW_KAFKA_TLS_KEY_FILE", "cannot read"}},
		{"cert without key", []string{"SAGAFLOW_KAFKA_TLS_ENABLED=true", "SAGAFLOW_KAFKA_TLS_CERT_FILE=" + files.Cert},
			[]string{"SAGAFLOW_KAFKA_TLS_KEY_FILE"}},
		{"TLS file without TLS", []string{"SAGAFLOW_KAFKA_TLS_CA_FILE=" + files.CA}, []string{"SAGAFLOW_KAFKA_TLS_ENABLED"}},
		{"retention flag not a boolean", []string{"SAGAFLOW_RETENTION_ENABLED=on"}, []string{"SAGAFLOW_RETENTION_ENABLED"}},
		{"inbox window not a duration", []string{"SAGAFLOW_RETENTION_INBOX_AFTER=7d"}, []string{"SAGAFLOW_RETENTION_INBOX_AFTER", "7d"}},
		{"interval without unit", []string{"SAGAFLOW_RETENTION_INTERVAL=60"}, []string{"SAGAFLOW_RETENTION_INTERVAL", "missing unit"}},
		{"interval zero", []string{"SAGAFLOW_RETENTION_INTERVAL=0s"}, []string{"SAGAFLOW_RETENTION_INTERVAL", "over 0"}},
		{"batch size not a number", []string{"SAGAFLOW_RETENTION_BATCH_SIZE=many"}, []string{"SAGAFLOW_RETENTION_BATCH_SIZE"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			requireRefused(t, startNode(t, append(append([]string{}, base...), c.env...)...), append([]string{"participant failed"}, c.want...)...)
		})
	}
}

// TestNodeParticipantRefusesBarrierWindowShorterThanInbox: as the Go
// purger, the participant refuses a barrier window shorter than the inbox
// window (a redelivered command the inbox no longer dedupes must still
// find its barrier row).
func TestNodeParticipantRefusesBarrierWindowShorterThanInbox(t *testing.T) {
	nodeDeps(t)
	p := startNode(t,
		"SAGAFLOW_KAFKA_BROKERS="+testkit.FreeAddr(t), "SAGAFLOW_PARTICIPANT=refused",
		"SAGAFLOW_DATABASE_URL=postgres://postgres@"+testkit.FreeAddr(t)+"/postgres?sslmode=disable",
		"SAGAFLOW_RETENTION_INBOX_AFTER=48h", "SAGAFLOW_RETENTION_BARRIER_AFTER=24h",
	)
	requireRefused(t, p, "SAGAFLOW_RETENTION_BARRIER_AFTER (24h0m0s) is shorter than SAGAFLOW_RETENTION_INBOX_AFTER (48h0m0s)")
}

// TestNodeParticipantRetention: with retention off, old rows stay; with it
// on (every second, batches of 2), the inbox rows older than the inbox
// window and the barrier rows older than the barrier window go, batch by
// batch, except rows another transaction holds (until it ends); younger
// rows stay; SIGTERM stops it with status 0.
func TestNodeParticipantRetention(t *testing.T) {
	nodeDeps(t)
	brokers := testkit.Brokers(t)
	dbURL := testkit.Database(t)
	name := "retention_" + testkit.RandomSuffix(3)
	env := []string{
		"SAGAFLOW_KAFKA_BROKERS=" + strings.Join(brokers, ","), "SAGAFLOW_DATABASE_URL=" + dbURL,
		"SAGAFLOW_PARTICIPANT=" + name, "SAGAFLOW_KAFKA_PARTITIONS=1", "SAGAFLOW_RETENTION_INTERVAL=1s",
		"SAGAFLOW_RETENTION_INBOX_AFTER=1h", "SAGAFLOW_RETENTION_BARRIER_AFTER=2h",
	}
	ctx := testkit.Context(t, 3*time.Minute)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// counts go through a connection of their own: conn holds a
	// transaction later.
	other, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	inbox, barrier := pgx.Identifier{name, "inbox"}.Sanitize(), pgx.Identifier{name, "barrier"}.Sanitize()

	// Retention off: the participant makes its schema and purges nothing.
	off := startNode(t, append(append([]string{}, env...), "SAGAFLOW_RETENTION_ENABLED=false")...)
	testkit.Eventually(t, time.Minute, "the participant's schema with its BRIN indexes", func() (bool, error) {
		if err := off.exitedEarly(); err != nil {
			return false, err
		}
		var ok bool
		err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`,
			pgx.Identifier{name, "inbox_received_brin"}.Sanitize(), pgx.Identifier{name, "barrier_created_brin"}.Sanitize()).Scan(&ok)
		return ok, err
	})
	run := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// 5 inbox rows older than the inbox window, 2 younger; 5 barrier rows
	// older than the barrier window, 2 older than the inbox window only and
	// 1 new.
	run(`INSERT INTO ` + inbox + ` (message_id, received_at) SELECT gen_random_uuid(), now() - interval '3 hours' FROM generate_series(1, 5)`)
	run(`INSERT INTO ` + inbox + ` (message_id, received_at) SELECT gen_random_uuid(), now() - interval '30 minutes' FROM generate_series(1, 2)`)
	run(`INSERT INTO ` + barrier + ` (saga_id, step, action, outcome, created_at) SELECT gen_random_uuid(), 'conformance', 'forward', 'success', now() - interval '3 hours' FROM generate_series(1, 5)`)
	run(`INSERT INTO ` + barrier + ` (saga_id, step, action, outcome, created_at) SELECT gen_random_uuid(), 'conformance', 'forward', 'success', now() - interval '90 minutes' FROM generate_series(1, 2)`)
	run(`INSERT INTO ` + barrier + ` (saga_id, step, action, outcome) VALUES (gen_random_uuid(), 'conformance', 'compensate', 'success')`)
	counts := func() (oldInbox, newInbox, oldBarrier, newBarrier int) {
		t.Helper()
		if err := other.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM `+inbox+` WHERE received_at < now() - interval '1 hour'),
			(SELECT count(*) FROM `+inbox+` WHERE received_at >= now() - interval '1 hour'),
			(SELECT count(*) FROM `+barrier+` WHERE created_at < now() - interval '2 hours'),
			(SELECT count(*) FROM `+barrier+` WHERE created_at >= now() - interval '2 hours')`).Scan(&oldInbox, &newInbox, &oldBarrier, &newBarrier); err != nil {
			t.Fatal(err)
		}
		return
	}
	// It said at start that retention is off, and there is no purger.
	testkit.Eventually(t, 20*time.Second, "the participant saying retention is off", func() (bool, error) {
		if err := off.exitedEarly(); err != nil {
			return false, err
		}
		return strings.Contains(off.out.String(), `"msg":"retention off (SAGAFLOW_RETENTION_ENABLED=false)"`), nil
	})
	if oi, ni, ob, nb := counts(); oi != 5 || ni != 2 || ob != 5 || nb != 3 {
		t.Fatalf("with SAGAFLOW_RETENTION_ENABLED=false: inbox %d old %d new, barrier %d old %d new; want 5, 2, 5, 3 (nothing purged)", oi, ni, ob, nb)
	}
	off.stop(t)
	if strings.Contains(off.out.String(), "retention purged") {
		t.Fatalf("retention ran while disabled:\n%s", off.out.String())
	}

	// A transaction holds one old inbox row and one old barrier row, as a
	// handler would.
	holder, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	var held int
	if err := holder.QueryRow(ctx, `SELECT (SELECT count(*) FROM (SELECT 1 FROM `+inbox+` WHERE received_at < now() - interval '1 hour' LIMIT 1 FOR UPDATE) i)
		+ (SELECT count(*) FROM (SELECT 1 FROM `+barrier+` WHERE created_at < now() - interval '2 hours' LIMIT 1 FOR UPDATE) b)`).Scan(&held); err != nil || held != 2 {
		t.Fatalf("lock an old inbox and barrier row: %d locked, %v", held, err)
	}
	metricsAddr := testkit.FreeAddr(t)
	on := startNode(t, append(append([]string{}, env...), "SAGAFLOW_RETENTION_BATCH_SIZE=2", "SAGAFLOW_METRICS_ADDR="+metricsAddr)...)
	testkit.Eventually(t, 20*time.Second, "the old rows nobody holds purged", func() (bool, error) {
		if err := on.exitedEarly(); err != nil {
			return false, err
		}
		oi, _, ob, _ := counts()
		return oi == 1 && ob == 1, nil
	})
	// Two more whole cycles, counted by the participant, leave the held
	// rows where they are.
	cycles := counterValue(t, metricsAddr, "sagaflow_retention_cycles_total", name)
	testkit.Eventually(t, 20*time.Second, "two more retention cycles", func() (bool, error) {
		if err := on.exitedEarly(); err != nil {
			return false, err
		}
		return counterValue(t, metricsAddr, "sagaflow_retention_cycles_total", name) >= cycles+2, nil
	})
	if oi, ni, ob, nb := counts(); oi != 1 || ni != 2 || ob != 1 || nb != 3 {
		t.Fatalf("while a transaction holds an old row of each: inbox %d old %d new, barrier %d old %d new; want 1, 2, 1, 3", oi, ni, ob, nb)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the rows that were held purged", func() (bool, error) {
		if err := on.exitedEarly(); err != nil {
			return false, err
		}
		oi, _, ob, _ := counts()
		return oi == 0 && ob == 0, nil
	})
	if oi, ni, ob, nb := counts(); oi != 0 || ni != 2 || ob != 0 || nb != 3 {
		t.Fatalf("after the purge: inbox %d old %d new, barrier %d old %d new; want 0, 2, 0, 3", oi, ni, ob, nb)
	}
	on.stop(t)
	out := on.out.String()
	for _, table := range []string{name + ".inbox", name + ".barrier"} {
		if !strings.Contains(out, `"msg":"retention purged rows","table":"`+table+`"`) {
			t.Errorf("no purge of %s logged:\n%s", table, out)
		}
	}
}

// exitedEarly returns an error once the process has exited.
func (p *nodeProc) exitedEarly() error {
	select {
	case <-p.exited:
		return fmt.Errorf("the participant exited (%v); its output:\n%s", p.err, p.out.String())
	default:
		return nil
	}
}

// writeCommand produces cmd (encoded as value) to topic with its wire
// headers, keyed by its aggregate id, as the orchestrator's relay does.
func writeCommand(ctx context.Context, t *testing.T, w *kafka.Writer, topic string, cmd message.Command, value []byte) {
	t.Helper()
	if err := w.WriteMessages(ctx, kafka.Message{Topic: topic, Key: []byte(cmd.AggregateID), Value: value, Headers: []kafka.Header{
		{Key: message.HeaderMessageID, Value: []byte(cmd.MessageID.String())},
		{Key: message.HeaderSagaID, Value: []byte(cmd.SagaID.String())},
		{Key: message.HeaderContentType, Value: []byte(message.ContentTypeJSON)},
	}}); err != nil {
		t.Fatalf("produce the command to %s: %v", topic, err)
	}
}

// conformanceCommand is a forward of the conformance step that succeeds
// (effect key key), answered on replies, and its encoding.
func conformanceCommand(t *testing.T, replies, key string) (message.Command, []byte) {
	t.Helper()
	cmd := message.Command{
		MessageID: uuid.New(), SagaID: uuid.New(), SagaType: conformance.SagaType, AggregateID: "agg-1",
		Step: conformance.StepName, Action: message.Forward, Attempt: 1, ReplyTo: replies, SentAt: time.Now().UTC(),
		Payload: json.RawMessage(`{"key":` + strconv.Quote(key) + `,"mode":"succeed"}`),
	}
	value, err := message.EncodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, value
}
