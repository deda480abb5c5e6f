package cli

import "testing"

func TestLoopbackAddresses(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:80": true, "[::1]:8080": true, "localhost:8080": true, "LOCALHOST:1": true,
		"[::ffff:127.0.0.1]:8080": true, "": true, // no listener
		"0.0.0.0:8080": false, ":8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "example.com:80": false,
		"localhost.example.com:80": false, "127.0.0.1": false, // no port: does not parse
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
	ok := HTTPConfig{Addr: "0.0.0.0:8080", AdminToken: "9b1e4f7a2c8d05e3b6a1f9c4d7e2a8b5", ClientToken: "e5c2a9f1b7d4083c6e1a5f9b2d8c4a7e"}
	if err := ok.validateServe(); err != nil {
		t.Errorf("both strong tokens beyond loopback: %v", err)
	}
	if err := (HTTPConfig{Addr: "127.0.0.1:8080"}).validateServe(); err != nil {
		t.Errorf("no tokens on loopback: %v", err)
	}
}
