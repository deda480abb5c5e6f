package kafkaclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/testkit"
)

func TestSecurityValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    kafkaclient.Security
		want string // "" = valid
	}{
		{"empty", kafkaclient.Security{}, ""},
		{"tls", kafkaclient.Security{TLS: kafkaclient.TLSConfig{Enabled: true, CAFile: "ca.pem"}}, ""},
		{"scram lower case", kafkaclient.Security{SASL: kafkaclient.SASLConfig{Mechanism: "scram-sha-512", Username: "u", Password: "p"}}, ""},
		{"tls files without enabled", kafkaclient.Security{TLS: kafkaclient.TLSConfig{CAFile: "ca.pem"}}, "kafka.tls.enabled"},
		{"cert without key", kafkaclient.Security{TLS: kafkaclient.TLSConfig{Enabled: true, CertFile: "c.pem"}}, "go together"},
		{"unknown mechanism", kafkaclient.Security{SASL: kafkaclient.SASLConfig{Mechanism: "GSSAPI", Username: "u"}}, `"GSSAPI"`},
		{"mechanism without user", kafkaclient.Security{SASL: kafkaclient.SASLConfig{Mechanism: "PLAIN"}}, "username"},
		{"PLAIN without TLS", kafkaclient.Security{SASL: kafkaclient.SASLConfig{Mechanism: "plain", Username: "u", Password: "p"}}, "kafka.sasl.allow_plaintext"},
		{"PLAIN without TLS allowed", kafkaclient.Security{SASL: kafkaclient.SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p", AllowPlaintext: true}}, ""},
		{"PLAIN over TLS", kafkaclient.Security{TLS: kafkaclient.TLSConfig{Enabled: true}, SASL: kafkaclient.SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p"}}, ""},
		{"SCRAM without TLS", kafkaclient.Security{SASL: kafkaclient.SASLConfig{Mechanism: "SCRAM-SHA-256", Username: "u", Password: "p"}}, ""},
		{"user without mechanism", kafkaclient.Security{SASL: kafkaclient.SASLConfig{Username: "u", Password: "p"}}, "mechanism is empty"},
	} {
		err := tc.s.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate() = %v, want an error containing %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "p\"") {
			t.Errorf("%s: the error %q quotes the password", tc.name, err)
		}
	}
	if _, err := (kafkaclient.Security{TLS: kafkaclient.TLSConfig{Enabled: true, CAFile: "/no/such/ca.pem"}}).Dialer(); err == nil || !strings.Contains(err.Error(), "ca_file") {
		t.Errorf("Dialer with a missing CA file = %v, want an error naming kafka.tls.ca_file", err)
	}
}

// roundTrip creates a topic, writes a record and reads it back through a
// consumer group, every connection made as s says.
func roundTrip(t *testing.T, brokers []string, s kafkaclient.Security) error {
	t.Helper()
	d, err := s.Dialer()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topic := "sec-" + testkit.RandomSuffix(6)
	if err := kafkaclient.EnsureTopicsWith(ctx, d, brokers, 1, 1, topic); err != nil {
		return err
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Transport: kafkaclient.Transport(d, "test"), BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("secret-hello")}); err != nil {
		return err
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Dialer: d, GroupID: "g-" + testkit.RandomSuffix(4), Topic: topic, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		return err
	}
	if string(m.Value) != "secret-hello" {
		t.Fatalf("read %q, want secret-hello", m.Value)
	}
	return nil
}

// Every SASL mechanism, over TLS and without, against the embedded broker:
// the right credentials go through (topic creation, produce, a consumer
// group), wrong or missing ones are refused with the reason.
func TestSecuredBrokerRoundTrip(t *testing.T) {
	t.Parallel()
	files := testkit.MakeTLSFiles(t)
	for _, mech := range []string{kafkaclient.SASLPlain, kafkaclient.SASLScramSHA256, kafkaclient.SASLScramSHA512} {
		for _, withTLS := range []bool{false, true} {
			name := mech
			if withTLS {
				name += "+TLS"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				cfg := devbroker.Config{Partitions: 1, SASL: devbroker.SASL{Mechanism: mech, User: "sagaflow", Password: "s3cret"}}
				tlsc := kafkaclient.TLSConfig{}
				if withTLS {
					cfg.TLSCertFile, cfg.TLSKeyFile = files.Cert, files.Key
					tlsc = kafkaclient.TLSConfig{Enabled: true, CAFile: files.CA}
				}
				b, err := devbroker.Start(cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(b.Close)
				// PLAIN without TLS only when explicitly allowed.
				good := kafkaclient.Security{TLS: tlsc, SASL: kafkaclient.SASLConfig{Mechanism: mech, Username: "sagaflow", Password: "s3cret", AllowPlaintext: !withTLS}}
				if err := roundTrip(t, b.Addrs(), good); err != nil {
					t.Fatalf("with the right credentials: %v", err)
				}
				bad := good
				bad.SASL.Password = "wrong"
				if err := roundTrip(t, b.Addrs(), bad); err == nil {
					t.Fatal("a wrong password went through")
				} else if strings.Contains(err.Error(), "wrong") {
					t.Fatalf("the error quotes the password: %v", err)
				}
				none := kafkaclient.Security{TLS: tlsc}
				if err := roundTrip(t, b.Addrs(), none); err == nil {
					t.Fatal("a client without credentials went through")
				}
			})
		}
	}
	t.Run("TLS with an unknown CA is refused", func(t *testing.T) {
		t.Parallel()
		b, err := devbroker.Start(devbroker.Config{Partitions: 1, TLSCertFile: files.Cert, TLSKeyFile: files.Key})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		other := testkit.MakeTLSFiles(t)
		err = roundTrip(t, b.Addrs(), kafkaclient.Security{TLS: kafkaclient.TLSConfig{Enabled: true, CAFile: other.CA}})
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("TLS against a certificate of another CA = %v, want a certificate error", err)
		}
		if err := roundTrip(t, b.Addrs(), kafkaclient.Security{TLS: kafkaclient.TLSConfig{Enabled: true, CAFile: files.CA}}); err != nil {
			t.Fatalf("TLS with the right CA: %v", err)
		}
		if err := roundTrip(t, b.Addrs(), kafkaclient.Security{TLS: kafkaclient.TLSConfig{Enabled: true, InsecureSkipVerify: true}}); err != nil {
			t.Fatalf("TLS with insecure_skip_verify: %v", err)
		}
	})
}
