package repo

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// RegisterTypes tells a connection's type map which PostgreSQL types the
// Go types in kfsdb's parameters are, for the exec modes that do not ask
// the server: pgx.QueryExecModeExec and pgx.QueryExecModeSimpleProtocol,
// which PgBouncer's transaction pooling needs. Without it MarkDispatched
// fails there with "unable to encode []uuid.UUID … for unknown type (OID
// 0)". Call it from pgxpool.Config.AfterConnect:
//
//	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
//	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
//		repo.RegisterTypes(c.TypeMap())
//		return nil
//	}
//
// It is harmless in the default mode, and does nothing with a nil map.
func RegisterTypes(m *pgtype.Map) {
	if m == nil {
		return
	}
	m.RegisterDefaultPgType(uuid.UUID{}, "uuid")
	m.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
}
