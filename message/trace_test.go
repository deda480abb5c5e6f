package message_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaflow/sagaflow/message"
)

const goodTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestTraceParentValidator: only version 00, exactly 55 bytes of
// lower-case hex and dashes, non-zero ids, is kept; everything else is
// refused with the code that names why.
func TestTraceParentValidator(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    string
		code message.TraceDropCode
	}{
		{goodTP, ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", ""},
		// later versions, whatever their length: refused (they were kept raw)
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", message.TraceDropVersion},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", message.TraceDropVersion},
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("x", 20<<10), message.TraceDropVersion},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", message.TraceDropVersion},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-\xff\xfe", message.TraceDropVersion},
		{"0", message.TraceDropLength},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", message.TraceDropLength},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", message.TraceDropLength},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011", message.TraceDropLength},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", message.TraceDropFormat},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0F", message.TraceDropFormat},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", message.TraceDropFormat},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7+01", message.TraceDropFormat},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902\xff\xfe-01", message.TraceDropFormat},
		{"00-4bf92f3577b34da6a3ce929d0e0e473\x00-00f067aa0ba902b7-01", message.TraceDropFormat},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", message.TraceDropZeroID},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", message.TraceDropZeroID},
	} {
		code, reason := message.TraceParentProblem(c.v)
		if code != c.code {
			t.Errorf("TraceParentProblem(%.70q) = %q (%s), want %q", c.v, code, reason, c.code)
		}
		if (code == "") != (reason == "") || len(reason) > 200 || !utf8.ValidString(reason) {
			t.Errorf("TraceParentProblem(%.70q): reason %q: want one exactly when refused, short, UTF-8", c.v, reason)
		}
		if message.ValidTraceParent(c.v) != (c.code == "") {
			t.Errorf("ValidTraceParent(%.70q) = %v", c.v, !(c.code == ""))
		}
	}
	if id := message.TraceID(goodTP); id != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("TraceID = %q", id)
	}
	if id := message.TraceID("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"); id != "" {
		t.Errorf("TraceID of a version 01 = %q, want none", id)
	}
}

// TestTraceStateValidator: the W3C list grammar, at most 32 members, 512
// bytes, no key twice; kept values are normalised.
func TestTraceStateValidator(t *testing.T) {
	t.Parallel()
	many := func(n int) string {
		var m []string
		for i := range n {
			m = append(m, "k"+strings.Repeat("a", i%5)+string(rune('a'+i%26))+string(rune('a'+i/26))+"=v")
		}
		return strings.Join(m, ",")
	}
	for _, c := range []struct {
		v, clean string
		code     message.TraceDropCode
	}{
		{"", "", ""},
		{" , ,", "", ""},
		{"rojo=00f067aa0ba902b7", "rojo=00f067aa0ba902b7", ""},
		{"rojo=00f067aa0ba902b7, congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", ""},
		{" a=1 ,\t,b=2\t", "a=1,b=2", ""},
		{"tenant1@sys=x,a/b*c_d-e=with space inside", "tenant1@sys=x,a/b*c_d-e=with space inside", ""},
		{"0t@s=1", "0t@s=1", ""},
		{many(32), many(32), ""},
		{many(33), "", message.TraceDropMembers},
		{"a=" + strings.Repeat("b", 511), "", message.TraceDropSize},
		{"a=" + strings.Repeat("b", 257), "", message.TraceDropFormat},
		{"A=1", "", message.TraceDropFormat},
		{"1a=1", "", message.TraceDropFormat},
		{"a", "", message.TraceDropFormat},
		{"=1", "", message.TraceDropFormat},
		{"a=", "", message.TraceDropFormat},
		{"a=b=c", "", message.TraceDropFormat},
		{"a=b c ", "a=b c", ""}, // the trailing blank is OWS around the member
		{"a=\x7f", "", message.TraceDropFormat},
		{"a=\xff\xfe", "", message.TraceDropFormat},
		{"a=\x00", "", message.TraceDropFormat},
		{"a\xff=1", "", message.TraceDropFormat},
		{"a@=1", "", message.TraceDropFormat},
		{"@s=1", "", message.TraceDropFormat},
		{"t@S=1", "", message.TraceDropFormat},
		{"t@s23456789012345=1", "", message.TraceDropFormat},
		{"t@s@u=1", "", message.TraceDropFormat},
		{"a=1,b=2,a=3", "", message.TraceDropRepeated},
	} {
		clean, code, reason := message.TraceStateProblem(c.v)
		if code != c.code || clean != c.clean {
			t.Errorf("TraceStateProblem(%.60q) = %q, %q (%s); want %q, %q", c.v, clean, code, reason, c.clean, c.code)
		}
		if (code == "") != (reason == "") || len(reason) > 200 || !utf8.ValidString(reason) {
			t.Errorf("TraceStateProblem(%.60q): reason %q: want one exactly when refused, short, UTF-8", c.v, reason)
		}
	}
}

// TestCheckTraceContext: the door drops an invalid traceparent with its
// tracestate, an invalid tracestate alone, and reports each drop.
func TestCheckTraceContext(t *testing.T) {
	t.Parallel()
	poison := "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("\xff", 20<<10)
	for _, c := range []struct {
		tp, ts, wantTP, wantTS string
		drops                  []string // header/code
	}{
		{"", "", "", "", nil},
		{goodTP, "", goodTP, "", nil},
		{goodTP, "a=1, b=2", goodTP, "a=1,b=2", nil},
		{goodTP, "A=1", goodTP, "", []string{"tracestate/format"}},
		{poison, "a=1", "", "", []string{"traceparent/version", "tracestate/no_parent"}},
		{poison, "", "", "", []string{"traceparent/version"}},
		{"", "a=1", "", "", []string{"tracestate/no_parent"}},
	} {
		tp, ts, drops := message.CheckTraceContext(c.tp, c.ts)
		var got []string
		for _, d := range drops {
			got = append(got, d.Header+"/"+string(d.Code))
			if len(d.String()) > 250 || !utf8.ValidString(d.String()) {
				t.Errorf("drop %q: want a short UTF-8 text", d)
			}
		}
		if tp != c.wantTP || ts != c.wantTS || strings.Join(got, " ") != strings.Join(c.drops, " ") {
			t.Errorf("CheckTraceContext(%.60q, %q) = %.60q, %q, %v; want %.60q, %q, %v", c.tp, c.ts, tp, ts, got, c.wantTP, c.wantTS, c.drops)
		}
	}
}

func TestEchoTraceCopiesOnlyAValidContext(t *testing.T) {
	t.Parallel()
	rec := message.Record{Headers: []message.Header{{Key: "traceparent", Value: []byte(goodTP)}, {Key: "tracestate", Value: []byte("a=1")}}}
	h := message.EchoTrace(map[string]string{"message-id": "x"}, rec)
	if h["traceparent"] != goodTP || h["tracestate"] != "a=1" || h["message-id"] != "x" {
		t.Errorf("EchoTrace = %v", h)
	}
	for _, bad := range []message.Record{
		{Headers: []message.Header{{Key: "traceparent", Value: []byte("junk")}, {Key: "tracestate", Value: []byte("a=1")}}},
		{Headers: []message.Header{{Key: "traceparent", Value: []byte("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("z", 20<<10))}}},
		{Headers: []message.Header{{Key: "traceparent", Value: []byte(goodTP)}, {Key: "traceparent", Value: []byte(goodTP)}}},
	} {
		if h := message.EchoTrace(map[string]string{}, bad); len(h) != 0 {
			t.Errorf("EchoTrace of an invalid traceparent = %.80v, want nothing", h)
		}
	}
	// a bad tracestate alone is dropped; several tracestate headers make one list
	two := message.Record{Headers: []message.Header{{Key: "traceparent", Value: []byte(goodTP)}, {Key: "tracestate", Value: []byte("a=1")}, {Key: "tracestate", Value: []byte("b=2")}}}
	if h := message.EchoTrace(map[string]string{}, two); h["traceparent"] != goodTP || h["tracestate"] != "a=1,b=2" {
		t.Errorf("EchoTrace of two tracestate headers = %v", h)
	}
	badTS := message.Record{Headers: []message.Header{{Key: "traceparent", Value: []byte(goodTP)}, {Key: "tracestate", Value: []byte("a=\xff")}}}
	if h := message.EchoTrace(map[string]string{}, badTS); h["traceparent"] != goodTP || len(h) != 1 {
		t.Errorf("EchoTrace with an invalid tracestate = %v, want the traceparent alone", h)
	}
}

// FuzzTraceContext: whatever comes in, what is kept is a W3C trace context
// within the bounds that OpenTelemetry's own propagator reads back
// unchanged (when its flags are ones OpenTelemetry knows), and the
// validator is a fixed point on it.
func FuzzTraceContext(f *testing.F) {
	f.Add(goodTP, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-\xff", "a=1")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\xff", " a=1 ,, t@s=x y")
	f.Add("ff-00000000000000000000000000000000-0000000000000000-00", "a=1,a=2")
	w3c := propagation.TraceContext{}
	f.Fuzz(func(t *testing.T, tp, ts string) {
		keptTP, keptTS, drops := message.CheckTraceContext(tp, ts)
		for _, d := range drops {
			if !utf8.ValidString(d.Reason) || len(d.Reason) > 200 || d.Code == "" {
				t.Fatalf("drop %+v: want a code and a short UTF-8 reason", d)
			}
		}
		if keptTP == "" {
			if keptTS != "" {
				t.Fatalf("tracestate %q kept without a traceparent", keptTS)
			}
			return
		}
		if keptTP != tp || len(keptTP) != message.TraceParentBytes || keptTP[:3] != "00-" {
			t.Fatalf("kept traceparent %q from %q", keptTP, tp)
		}
		if len(keptTS) > message.MaxTraceStateBytes || strings.Count(keptTS, ",") >= message.MaxTraceStateMembers {
			t.Fatalf("kept tracestate %q is over the bounds", keptTS)
		}
		for i := 0; i < len(keptTS); i++ {
			if keptTS[i] < 0x20 || keptTS[i] > 0x7e {
				t.Fatalf("kept tracestate %q has byte 0x%02x", keptTS, keptTS[i])
			}
		}
		if tp2, ts2, d2 := message.CheckTraceContext(keptTP, keptTS); tp2 != keptTP || ts2 != keptTS || len(d2) != 0 {
			t.Fatalf("not a fixed point: %q %q -> %q %q %v", keptTP, keptTS, tp2, ts2, d2)
		}
		if keptTP[53] != '0' || keptTP[54] > '3' {
			return // OpenTelemetry refuses flag bits it does not know; W3C leaves them to the receiver
		}
		ctx := w3c.Extract(context.Background(), propagation.MapCarrier{"traceparent": keptTP, "tracestate": keptTS})
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsValid() || sc.TraceID().String() != keptTP[3:35] || sc.SpanID().String() != keptTP[36:52] {
			t.Fatalf("OpenTelemetry reads %q as %v", keptTP, sc)
		}
		if got := sc.TraceState().String(); keptTS != "" && got != keptTS {
			t.Fatalf("OpenTelemetry reads tracestate %q as %q", keptTS, got)
		}
	})
}
