package history

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Probe is one request of [Measure] and what it took.
type Probe struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Status int    `json:"status"`
	Bytes  int    `json:"bytes"`
	// Items is the number of sagas a list answered (-1: not a list).
	Items  int             `json:"items"`
	Median time.Duration   `json:"median_ns"`
	Max    time.Duration   `json:"max_ns"`
	Runs   []time.Duration `json:"runs_ns"`
}

// MeasureOptions of [Measure].
type MeasureOptions struct {
	// BaseURL of a serving orchestrator's HTTP API on the filled database.
	BaseURL string
	// Token, if set, is sent as a bearer token (a read token is enough).
	Token string
	// Schema is the orchestrator's schema (default "sagaflow").
	Schema string
	// Repeat is how many times each request runs (default 5).
	Repeat int
	// Client defaults to one with a 60 s timeout.
	Client *http.Client
}

// Measure times the reads an operator makes on a long history: the
// list's first page, filtered pages, a page deep in the history (a cursor
// at the middle of the span: keyset pagination makes it cost what the
// first page costs), a business-key lookup, the stuck list, the stats and
// the page's overview. It reads the database only to pick a saga from the
// middle of the history (by primary key); the timings are of the API.
func Measure(ctx context.Context, pool *pgxpool.Pool, o MeasureOptions) ([]Probe, error) {
	o.Schema = cmp.Or(o.Schema, "sagaflow")
	o.Repeat = cmp.Or(o.Repeat, 5)
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 60 * time.Second}
	}
	var (
		key    string
		midAt  time.Time
		midID  uuid.UUID
		sagas  = pgx.Identifier{o.Schema, "sagas"}.Sanitize()
		middle = `SELECT id, aggregate_id, created_at FROM ` + sagas + ` WHERE created_at <= (SELECT min(created_at) + (max(created_at) - min(created_at)) / 2 FROM ` + sagas + `)
ORDER BY created_at DESC, id DESC LIMIT 1`
	)
	if err := pool.QueryRow(ctx, middle).Scan(&midID, &key, &midAt); err != nil {
		return nil, fmt.Errorf("history: pick a saga in the middle of the history: %w", err)
	}
	cursor := base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(midAt.UnixNano(), 10) + "|" + midID.String()))
	probes := []Probe{
		{Name: "list, first page", Path: "/sagas?limit=50"},
		{Name: "list, state filter", Path: "/sagas?state=compensated&limit=50"},
		{Name: "list, type filter", Path: "/sagas?type=bench.generic&limit=50"},
		{Name: "list, rare state", Path: "/sagas?state=failed&limit=50"},
		// The common finished state, alone and with a type: the newest
		// sagas are the ones in flight, and these pages must not read them.
		{Name: "list, completed", Path: "/sagas?state=completed&limit=50"},
		{Name: "list, state and type", Path: "/sagas?state=completed&type=place-order&limit=50"},
		{Name: "list, running and type", Path: "/sagas?state=running&type=bench.generic&limit=50"},
		{Name: "list, deep page", Path: "/sagas?limit=50&cursor=" + url.QueryEscape(cursor)},
		{Name: "list, deep filtered page", Path: "/sagas?state=completed&limit=50&cursor=" + url.QueryEscape(cursor)},
		{Name: "lookup by business key", Path: "/sagas?aggregate_id=" + url.QueryEscape(key)},
		{Name: "one saga", Path: "/sagas/" + midID.String()},
		{Name: "stuck sagas", Path: "/sagas?stuck=true&limit=50"},
		{Name: "stats", Path: "/stats"},
		{Name: "page: overview", Path: "/ui/sagas"},
		{Name: "page: one saga", Path: "/ui/sagas/" + midID.String()},
	}
	for i := range probes {
		p := &probes[i]
		for range o.Repeat {
			d, status, body, err := get(ctx, o, p.Path)
			if err != nil {
				return probes[:i], fmt.Errorf("history: %s (%s): %w", p.Name, p.Path, err)
			}
			p.Runs = append(p.Runs, d)
			p.Status, p.Bytes, p.Items = status, len(body), -1
			if strings.HasPrefix(p.Path, "/sagas?") {
				var list struct {
					Sagas []json.RawMessage `json:"sagas"`
				}
				if err := json.Unmarshal(body, &list); err != nil {
					return probes[:i], fmt.Errorf("history: %s (%s): the answer is not a list: %w", p.Name, p.Path, err)
				}
				p.Items = len(list.Sagas)
			}
		}
		sorted := slices.Clone(p.Runs)
		slices.Sort(sorted)
		p.Median, p.Max = sorted[len(sorted)/2], sorted[len(sorted)-1]
	}
	return probes, nil
}

func get(ctx context.Context, o MeasureOptions, path string) (time.Duration, int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.BaseURL+path, nil)
	if err != nil {
		return 0, 0, nil, err
	}
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	start := time.Now()
	resp, err := o.Client.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	_ = resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return 0, 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return d, resp.StatusCode, body, fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
	}
	return d, resp.StatusCode, body, nil
}
