// Package validate is soda-validated's worker: one operator-fixed
// validator (a linter or compiler, /etc/soda/validate/KIND.conf) run on
// inline sources in a closed-network sandbox, one call at a time, with a
// verdict that says what was validated, by what, under which limits, and
// whether clean-up succeeded, and an in-toto Statement of it.
//
// Nothing in a request names a program, a path, a flag or a plugin: the
// request is 1 to 8 inline files, checked (names, sizes, encoding,
// patterns) before anything is allocated. The sources go into the
// sandbox's private in-memory workspace; no host file is bridged in; the
// sandbox has no network at all, a read-only system and the kind's limits.
package validate
