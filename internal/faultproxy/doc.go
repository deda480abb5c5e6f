// Package faultproxy is a loopback TCP proxy for fault-injection tests and
// the chaos harness. Put it between a component and Postgres or a Kafka
// broker, then cut the connection (every open connection is closed and new
// ones are refused until Restore), restore it, or slow every chunk of data
// down in both directions.
//
// It listens on loopback addresses only: it is a test tool, never a network
// service.
//
// Kafka clients connect to the address a broker advertises in its metadata,
// not to the bootstrap address they were given. To put a broker behind a
// proxy, the broker must advertise the proxy's address: AdvertisedListener
// wraps the broker's real listener so that its Addr reports the proxy (for
// kfake, pass it through kfake.ListenFn).
package faultproxy
