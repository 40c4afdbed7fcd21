// Package dbtest gives each test its own database on the real services: a PostgreSQL
// schema, a MariaDB database or a SQLite file, dropped when the test ends. Tests of every
// module of the project use it; it is not part of the public API.
//
// Addresses come from the environment, with the local services as defaults:
// OUTBOXER_TEST_POSTGRES (postgres://postgres@127.0.0.1:5432/test),
// OUTBOXER_TEST_MARIADB (root@tcp(127.0.0.1:3306)/). When a service cannot be reached the
// test is skipped, unless CI is set: then it fails.
//
// It also starts the SQS emulator the repository installs with npm (StartSQSEmulator),
// and times variants of a transaction against each other (Interleave).
package dbtest
