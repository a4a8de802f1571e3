package fusefs

import "golang.org/x/sys/unix"

// legacyMkdir is mkdir(2)'s number where the architecture has one.
const legacyMkdir = unix.SYS_MKDIR
