// Package api is the orchestrator's HTTP interface: start sagas, read
// their status and history (JSON, and the server-rendered status page
// under /ui/), act on them as an operator, pipeline stats, dead letters,
// and the health and metrics endpoints.
//
// Serve it over an engine, with the server limits it comes with:
//
//	srv, err := api.New(svc.Engine(), &api.Config{
//		AdminToken:  adminToken,  // operator actions
//		ClientToken: clientToken, // POST /sagas
//		Gatherer:    prometheus.DefaultGatherer,
//		Ready:       svc.Ready,
//	})
//	lim := api.Limits{}.WithDefaults()
//	hs := api.NewHTTPServer(srv, lim, logger)
//	ln, err := net.Listen("tcp", ":8080")
//	err = hs.Serve(api.LimitListener(ln, lim.MaxConnections))
//
// The routes, their bodies and answers are in api/openapi.yaml (served at
// GET /openapi.yaml, and as [OpenAPI]); docs/operations.md describes them
// for operators. Every JSON error answer is {"error": "...", "field":
// "..."} with a 4xx or 5xx status; a 500 carries only "internal error" and
// a request_id, the details go to the log under that id.
package api
