//go:build !soda_lean

package main

// leanBuild: this is the full sodactl, sodactl-full (see handoff.go); it
// serves every command itself and never hands one off.
const leanBuild = false
