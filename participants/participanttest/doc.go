// Package participanttest tests a participant's step handlers behind the
// real barrier, on a throwaway Postgres database: send commands, assert
// the replies the SDK would publish, then read the effects.
//
//	func TestBook(t *testing.T) {
//		k := participanttest.New(t, "hotel", hotel.Migrations, hotel.Register)
//		saga := uuid.New()
//		book := participanttest.Command(t, saga, "book-room", message.Forward, 1, map[string]string{"room": "12"})
//		participanttest.WantReply(t, k.Send(book)[0], message.Success, "")
//		again := book
//		again.MessageID = uuid.New() // a copy: answered from the barrier, not run again
//		participanttest.WantReply(t, k.Send(again)[0], message.Success, "")
//		held := participanttest.Read(t, k.Pool, k.Schema(), hotel.Rooms)
//		// ... assert held
//	}
//
// [Kit.Send] runs its commands as one consumed batch, through the same
// path Run takes (HandleCommands, in one committed transaction); an
// [Answer] is the reply enqueued for a command, or why it would be
// dead-lettered. [Exec], [ExecBatch] and [WantInvalid] run one handler
// directly in a transaction of its own, for the handler's own logic.
//
// It needs a Postgres server: $SAGAFLOW_TEST_DATABASE_URL, or
// postgres://postgres@127.0.0.1:5432/postgres; each New makes a database
// of its own, dropped when the test ends.
package participanttest
