package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/internal/testkit"
)

// http.health_addr: /healthz and /readyz on a listener of their own answer
// in full while every connection of the API is busy, and nothing else is
// served there.
func TestHealthListenerApartFromTheAPI(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	for _, p := range []string{"/healthz", "/readyz", "/sagas"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // a slow body holds its connection
			_, _ = io.WriteString(w, "{}")
		})
	}
	addrs := httpAddrs{api: testkit.FreeAddr(t), health: testkit.FreeAddr(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveHTTP(ctx, slog.New(slog.DiscardHandler), addrs, mux, api.Limits{MaxConnections: 2, MaxConnectionsPerClient: 2},
			func(ctx context.Context) error { <-ctx.Done(); return nil }, 10*time.Second)
	}()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	testkit.Eventually(t, 10*time.Second, "both listeners up", func() (bool, error) {
		for _, a := range []string{addrs.api, addrs.health} {
			res, err := client.Get("http://" + a + "/healthz")
			if err != nil {
				return false, nil
			}
			res.Body.Close()
		}
		return true, nil
	})
	// both slots of the API busy with slow bodies
	var slow []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addrs.api)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
		fmt.Fprintf(c, "POST /sagas HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		res, err := client.Get("http://" + addrs.health + p)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s on http.health_addr with the API's slots busy: %v %v", p, err, res)
		}
		res.Body.Close()
	}
	res, err := client.Get("http://" + addrs.health + "/sagas")
	if err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /sagas on http.health_addr = %v %v, want 404", err, res)
	}
	res.Body.Close()
	for _, c := range slow {
		c.Close()
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serveHTTP: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serveHTTP did not return after its context ended")
	}
}
