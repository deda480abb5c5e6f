// Package isolation holds only tests: one per countermeasure of
// docs/isolation.md, each showing the anomaly a saga lets through without
// it (a dirty read, a lost update, a fuzzy read) and that the reference
// participants, which use it, do not let it through.
package isolation
