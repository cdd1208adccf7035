package migrate_test

import (
	"context"
	"database/sql"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/repo"
)

// TestNilProviderAnswersWithInputError walks every exported method of
// *migrate.Provider (by reflection, so a new one is walked too) on a nil
// and on a zero Provider, and on a valid one with a nil context: none may
// panic, and each with an error result returns a *repo.InputError naming
// the Provider or ctx. Sources, without one, lists the embedded
// migrations. No database is needed: nothing may reach one.
func TestNilProviderAnswersWithInputError(t *testing.T) {
	t.Parallel()
	// sql.Open connects to nothing until asked; nothing here asks.
	db, err := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	valid, err := migrate.NewProvider(db)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, valid.Close()) })

	typ := reflect.TypeFor[*migrate.Provider]()
	require.Positive(t, typ.NumMethod())
	for _, receiver := range []struct {
		name  string
		p     *migrate.Provider
		ctx   context.Context
		field string
	}{
		{"nil", nil, context.Background(), "Provider"},
		{"zero", &migrate.Provider{}, context.Background(), "Provider"},
		{"nilContext", valid, nil, "ctx"},
	} {
		for m := range typ.Methods() {
			t.Run(receiver.name+"/"+m.Name, func(t *testing.T) {
				args := []reflect.Value{reflect.ValueOf(receiver.p)}
				takesCtx := false
				for i := 1; i < m.Type.NumIn(); i++ {
					in := m.Type.In(i)
					if in == reflect.TypeFor[context.Context]() {
						args, takesCtx = append(args, reflect.ValueOf(&receiver.ctx).Elem()), true
						continue
					}
					args = append(args, reflect.Zero(in))
				}
				if receiver.ctx == nil && !takesCtx {
					return // a valid Provider and no context to refuse
				}
				var out []reflect.Value
				require.NotPanics(t, func() { out = m.Func.Call(args) })
				last := out[len(out)-1]
				if last.Type() != reflect.TypeFor[error]() {
					require.Equal(t, "Sources", m.Name, "a method without an error result")
					require.NotEmpty(t, out[0].Interface(), "Sources lists the embedded migrations")
					return
				}
				err, _ := last.Interface().(error)
				var ie *repo.InputError
				require.ErrorAs(t, err, &ie)
				require.ErrorIs(t, err, repo.ErrInvalidInput)
				require.Equal(t, receiver.field, ie.Field)
			})
		}
	}
}

// TestConstructorsRefuseBadInput: NewProvider and OpenSQLWithLockTimeout
// refuse their bad arguments with a *repo.InputError naming them, before
// any connection.
func TestConstructorsRefuseBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var ie *repo.InputError
	_, err := migrate.NewProvider(nil)
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "db", ie.Field)
	for _, d := range []time.Duration{-time.Second, time.Microsecond} {
		_, err = migrate.OpenSQLWithLockTimeout(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", d)
		require.ErrorAs(t, err, &ie, d)
		require.Equal(t, "lockTimeout", ie.Field)
		require.ErrorIs(t, err, repo.ErrInvalidInput)
	}
}
