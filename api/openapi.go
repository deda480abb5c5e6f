package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3 document of every endpoint the Server serves
// (api/openapi.yaml), served at GET /openapi.yaml. TestOpenAPIMatchesTheHandlers
// checks it against the routes and the answers.
//
//go:embed openapi.yaml
var OpenAPI []byte

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(OpenAPI)
}
