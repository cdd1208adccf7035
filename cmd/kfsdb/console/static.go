package console

import (
	"io/fs"
	"net/http"
	"strings"
)

// serveStatic serves the embedded static files by name. It never lists a
// directory: /static/ and any directory are a 404, as is any name not
// embedded.
func (s *Server) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/static/")
	if info, err := fs.Stat(s.static, name); name == "" || err != nil || info.IsDir() {
		s.fail(w, r, http.StatusNotFound, "no such file")
		return
	}
	http.ServeFileFS(w, r, s.static, name)
}
