package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// WithDefaults fills every zero field and keeps what is set.
func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	d := api.Config{}.WithDefaults()
	if d.MaxDataBytes != api.DefaultMaxDataBytes || d.HandlerTimeout != api.HandlerTimeoutDefault || d.Logger == nil {
		t.Errorf("zero fields not set to their defaults: %+v", d)
	}
	if set := (api.Config{MaxDataBytes: 10, HandlerTimeout: time.Second}).WithDefaults(); set.MaxDataBytes != 10 || set.HandlerTimeout != time.Second {
		t.Errorf("WithDefaults changed set fields: %+v", set)
	}
	l := api.Limits{ReadTimeout: 2 * time.Second}.WithDefaults()
	if l.ReadHeaderTimeout != 2*time.Second || l.WriteTimeout != api.WriteTimeoutDefault || l.IdleTimeout != api.IdleTimeoutDefault ||
		l.MaxHeaderBytes != api.MaxHeaderBytesDefault || l.MaxConnections != api.MaxConnectionsDefault {
		t.Errorf("Limits.WithDefaults: %+v", l)
	}
}

// New refuses a bad Config naming the field, and takes nil.
func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	eng := (*orchestrator.Engine)(nil) // never called: New only routes
	for _, tc := range []struct {
		cfg   api.Config
		field string
	}{
		{api.Config{MaxDataBytes: -1}, "Config.MaxDataBytes"},
		{api.Config{MaxDataBytes: 1}, "Config.MaxDataBytes"},
		{api.Config{HandlerTimeout: -time.Second}, "Config.HandlerTimeout"},
		{api.Config{AdminToken: adminToken, ClientToken: adminToken}, "Config.ClientToken"},
		{api.Config{AdminToken: "change-me"}, "Config.AdminToken"},
		{api.Config{AdminToken: adminToken, ClientToken: "change-me-change-me-change-me"}, "Config.ClientToken"},
		{api.Config{ProtectReads: true}, "Config.ProtectReads"},
		{api.Config{ProtectMetrics: true}, "Config.ProtectMetrics"},
	} {
		if _, err := api.New(eng, &tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := api.New(eng, nil); err != nil {
		t.Fatalf("New with a nil config: %v", err)
	}
	if _, err := api.New(nil, nil); err == nil {
		t.Fatal("New without an engine: no error")
	}
}

// Limits.Validate names the field.
func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l       api.Limits
		handler time.Duration
		field   string
	}{
		{api.Limits{ReadTimeout: -time.Second}, 0, "Limits.ReadTimeout"},
		{api.Limits{IdleTimeout: -time.Second}, 0, "Limits.IdleTimeout"},
		{api.Limits{MaxHeaderBytes: -1}, 0, "Limits.MaxHeaderBytes"},
		{api.Limits{MaxConnections: -1}, 0, "Limits.MaxConnections"},
		{api.Limits{WriteTimeout: 5 * time.Second}, 0, "Limits.WriteTimeout"},
		{api.Limits{}, time.Minute, "Limits.WriteTimeout"},
	} {
		if err := tc.l.Validate(tc.handler); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v.Validate(%s) = %v, want an error naming %s", tc.l, tc.handler, err, tc.field)
		}
	}
	if err := (api.Limits{}).Validate(0); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
}
