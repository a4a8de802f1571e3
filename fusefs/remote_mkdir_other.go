//go:build !amd64

package fusefs

// legacyMkdir: this architecture has only mkdirat(2).
const legacyMkdir = -1
