package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/sagaflow/sagaflow/internal/faultproxy"
	"github.com/sagaflow/sagaflow/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// echoServer answers every line with the same line until the client closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go func() { _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func roundTrip(c net.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func TestForwardsAndCounts(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := roundTrip(c, "hello")
	if err != nil || got != "hello" {
		t.Fatalf("round trip = %q, %v; want hello", got, err)
	}
	// A direction's byte count is added once its write to the other side
	// returned: the echo can reach the client before the client->target
	// copy has counted its bytes, so the counts settle just after.
	var s faultproxy.Stats
	testkit.Eventually(t, 5*time.Second, "the byte counts settled", func() (bool, error) {
		s = p.Stats()
		return s.BytesUp == 6 && s.BytesDown == 6, nil
	})
	if s.Connections != 1 || s.Active != 1 || s.Cuts != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestCutClosesOpenAndRefusesNewUntilRestore(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, "a"); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	p.Cut() // idempotent: counted once
	if !p.IsCut() {
		t.Fatal("IsCut = false after Cut")
	}
	if _, err := roundTrip(c, "b"); err == nil {
		t.Fatal("open connection still works after Cut")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_, err = roundTrip(c2, "c")
		c2.Close()
	}
	if err == nil {
		t.Fatal("new connection works while cut")
	}

	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "d"); err != nil || got != "d" {
		t.Fatalf("after Restore round trip = %q, %v", got, err)
	}
	s := p.Stats()
	if s.Cuts != 1 || s.Killed != 1 || s.Refused != 1 || s.Connections != 2 {
		t.Fatalf("stats = %+v; want 1 cut, 1 killed, 1 refused, 2 connections", s)
	}
}

func TestLatencyDelaysBothWays(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	p.SetLatency(100 * time.Millisecond)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := roundTrip(c, "slow"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("round trip took %s, want >= 200ms (100ms each way)", el)
	}
	p.SetLatency(0)
	start = time.Now()
	if _, err := roundTrip(c, "fast"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el >= 200*time.Millisecond {
		t.Fatalf("round trip without latency took %s", el)
	}
}

func TestRejectsNonLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ listen, target string }{
		{"0.0.0.0:0", "127.0.0.1:1"},
		{"127.0.0.1:0", "10.1.2.3:5432"},
		{":0", "127.0.0.1:1"},
	} {
		if _, err := faultproxy.New(tc.listen, tc.target); !errors.Is(err, faultproxy.ErrNotLoopback) {
			t.Errorf("New(%q, %q) err = %v; want ErrNotLoopback", tc.listen, tc.target, err)
		}
	}
}

func TestCloseTwiceAndRefusesAfterClose(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.New("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, "x"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c, "y"); err == nil {
		t.Fatal("connection works after Close")
	}
}

// TestPostgresThroughProxy shows the outage a component sees: queries fail
// while cut and work again on a new connection after Restore.
func TestPostgresThroughProxy(t *testing.T) {
	t.Parallel()
	url := testkit.Database(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, net.JoinHostPort(cfg.Host, itoa(cfg.Port)))
	host, port, _ := net.SplitHostPort(p.Addr())
	cfg.Host = host
	cfg.Port = uint16(atoi(port))
	ctx := testkit.Context(t, 30*time.Second)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	p.Cut()
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err == nil {
		t.Fatal("query through a cut proxy succeeded")
	}
	if _, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		t.Fatal("connect through a cut proxy succeeded")
	}
	p.Restore()
	conn2, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(context.Background())
	if err := conn2.QueryRow(ctx, "SELECT 2").Scan(&one); err != nil || one != 2 {
		t.Fatalf("after Restore SELECT 2 = %d, %v", one, err)
	}
}

// TestKafkaBrokerBehindProxy puts a kfake broker behind the proxy with
// AdvertisedListener so that metadata sends clients to the proxy too.
func TestKafkaBrokerBehindProxy(t *testing.T) {
	t.Parallel()
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, real.Addr().String())
	adv, err := faultproxy.AdvertisedListener(real, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.SeedTopics(1, "t"),
		kfake.ListenFn(func(string, string) (net.Listener, error) { return adv, nil }),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	if got := cluster.ListenAddrs(); len(got) != 1 || got[0] != p.Addr() {
		t.Fatalf("broker advertises %v; want [%s]", got, p.Addr())
	}
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	w := &kafka.Writer{Addr: kafka.TCP(p.Addr()), Topic: "t", Transport: tr, MaxAttempts: 1, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	write := func(v string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return w.WriteMessages(ctx, kafka.Message{Value: []byte(v)})
	}
	if err := write("one"); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if err := write("two"); err == nil {
		t.Fatalf("produce through a cut proxy succeeded: %+v", p.Stats())
	}
	p.Restore()
	testkit.Eventually(t, 20*time.Second, "produce after Restore", func() (bool, error) {
		return write("three") == nil, nil
	})
	if s := p.Stats(); s.Connections < 2 || s.Cuts != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func itoa(n uint16) string { return strconv.Itoa(int(n)) }

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
