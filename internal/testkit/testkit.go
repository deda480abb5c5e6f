// Package testkit gives tests real infrastructure: an isolated Postgres
// database per test and a Kafka-protocol broker (an in-process kfake
// cluster, or real brokers from KAFKA_BROKERS). When Postgres or Kafka cannot
// be reached the test fails; it never skips.
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/migrations"
)

// DefaultDatabaseURL is used when SAGAFLOW_TEST_DATABASE_URL is not set.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is the server tests create their databases on.
func AdminURL() string {
	if u := os.Getenv("SAGAFLOW_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// RandomSuffix returns n random hex bytes.
func RandomSuffix(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Database creates a fresh database for t and returns its URL; the database
// is dropped when the test ends.
func Database(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("testkit: cannot reach Postgres at %s (set SAGAFLOW_TEST_DATABASE_URL, or start it: pg_ctlcluster --skip-systemctl-redirect 15 main start): %v", AdminURL(), err)
	}
	defer admin.Close(context.Background())
	name := "sftest_" + RandomSuffix(8)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testkit: create database %s: %v", name, err)
	}
	t.Cleanup(func() { DropDatabase(t, name) })
	cfg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		t.Fatalf("testkit: parse %s: %v", AdminURL(), err)
	}
	user := cfg.User
	if user == "" {
		user = "postgres"
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", user, cfg.Host, cfg.Port, name)
}

// DropDatabase drops database name on the server of AdminURL, closing its
// connections; a failure is reported as a test error.
func DropDatabase(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Errorf("testkit: drop database %s: %v", name, err)
		return
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("testkit: drop database %s: %v", name, err)
	}
}

// Pool returns a pool on a fresh database for t, closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolURL(t, Database(t))
}

// PoolURL opens a pool on url, closed when the test ends.
func PoolURL(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("testkit: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Migrate applies sets to pool or fails the test.
func Migrate(t testing.TB, pool *pgxpool.Pool, sets ...[]migrations.Set) {
	t.Helper()
	var all []migrations.Set
	for _, s := range sets {
		all = append(all, s...)
	}
	if _, err := migrations.Migrate(context.Background(), pool, all...); err != nil {
		t.Fatalf("testkit: migrate: %v", err)
	}
}

// MustSets unwraps a (sets, error) pair or fails the test.
func MustSets(t testing.TB) func([]migrations.Set, error) []migrations.Set {
	return func(s []migrations.Set, err error) []migrations.Set {
		t.Helper()
		if err != nil {
			t.Fatalf("testkit: migration sets: %v", err)
		}
		return s
	}
}

// Brokers returns bootstrap addresses: KAFKA_BROKERS when set, otherwise a
// fresh in-process broker closed when the test ends.
func Brokers(t testing.TB) []string {
	t.Helper()
	if b := kafkaclient.ParseBrokers(os.Getenv("KAFKA_BROKERS")); len(b) > 0 {
		return b
	}
	br, err := devbroker.Start(devbroker.Config{Partitions: 4})
	if err != nil {
		t.Fatalf("testkit: start in-process broker: %v", err)
	}
	t.Cleanup(br.Close)
	return br.Addrs()
}

// Topic returns a unique topic name for t and creates it with partitions
// partitions.
func Topic(t testing.TB, brokers []string, prefix string, partitions int) string {
	t.Helper()
	name := strings.ToLower(prefix) + "-" + RandomSuffix(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkaclient.EnsureTopics(ctx, brokers, partitions, 1, name); err != nil {
		t.Fatalf("testkit: create topic %s: %v", name, err)
	}
	return name
}

// Eventually polls cond every 10ms until it returns true, failing the test
// with what after timeout. cond returning an error fails at once.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// Context returns a context cancelled when the test ends or after timeout.
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}
