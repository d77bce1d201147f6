//go:build nofg_lease

package bench

// floodgateWrapped is empty when package lease does not build.
func floodgateWrapped() []inProc { return nil }
