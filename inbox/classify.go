package inbox

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// Class is what an error says about the message that met it.
type Class uint8

const (
	// ClassTransient: may pass on its own (a serialization failure, a
	// deadlock, an unclassified error). The batch is retried with backoff;
	// a message that keeps failing is isolated and dead-lettered after
	// Config.IsolateAfter attempts.
	ClassTransient Class = iota
	// ClassPermanent: a property of the message (Permanent, message.ErrInvalid,
	// a handler panic, or Postgres refusing the content). The message is
	// dead-lettered; the rest of its batch is applied.
	ClassPermanent
	// ClassUnavailable: the database (or the network to it) is not there.
	// Nothing is wrong with any message: the batch is retried with backoff
	// for as long as it takes, and never dead-lettered for it.
	ClassUnavailable
)

func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassPermanent:
		return "permanent"
	case ClassUnavailable:
		return "unavailable"
	}
	return "class?"
}

// Classify sorts an error met while handling messages.
//
// Permanent: errors marked with Permanent, wrapping message.ErrInvalid, a
// handler panic, and Postgres errors about the data: SQLSTATE class 22 (data
// exception: a NUL in text, invalid UTF-8, a value out of range, invalid
// JSON for jsonb), 23 (integrity constraint violation), 54 (program limit
// exceeded: an index row or a jsonb value too large) and 42804/42P18
// (datatype mismatch: the content does not fit the column).
//
// Unavailable: connection errors (SQLSTATE class 08, 57P01-57P03 shutdown,
// 53 insufficient resources, a closed or broken connection, network errors,
// io.EOF, a context deadline).
//
// Everything else is transient (40001 serialization failure, 40P01
// deadlock, 55P03 lock not available, 57014 query cancelled, unknown
// errors), and so is a write a handler deferred (txhooks.Tx.CommitWith)
// failing when a later statement sends it, whatever its cause: it belongs
// to the batch taken with writes deferred, which runs again at once
// without, not to the message being handled when it was sent.
func Classify(err error) Class {
	if err == nil {
		return ClassTransient
	}
	if he := (*handlerError)(nil); errors.As(err, &he) && he.deferred {
		return ClassTransient
	}
	if errIsPermanentMark(err) {
		return ClassPermanent
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		code := pg.Code
		switch {
		case len(code) != 5:
			return ClassTransient
		case code[:2] == "22", code[:2] == "23", code[:2] == "54", code == "42804", code == "42P18":
			return ClassPermanent
		case code[:2] == "08", code[:2] == "53", code == "57P01", code == "57P02", code == "57P03":
			return ClassUnavailable
		}
		return ClassTransient
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, pgconn.ErrConnClosed),
		errors.As(err, &ne), pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return ClassUnavailable
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return ClassUnavailable
	}
	return ClassTransient
}
