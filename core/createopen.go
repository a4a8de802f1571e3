package core

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrIsDir: the name is a directory (EISDIR).
var ErrIsDir error = fmt.Errorf("is a directory: %w", syscall.EISDIR)

// How says what CreateOrOpen found at the name.
type How int

const (
	Created   How = iota // it was free: the object is new
	Opened               // it held a file, opened as it was
	Truncated            // it held a file, cut to 0 bytes (O_TRUNC) and opened
)

// createRaces is how often CreateOrOpen tries again when the name it
// found taken is gone when it opens it. Each try means another client
// made the name and another removed it in between; a name that the index
// says is free and the store says is taken (a stored file kvfs has not
// adopted yet) would otherwise loop for ever.
const createRaces = 4

// errGone: the name CreateOrOpen found taken went before it was opened.
var errGone = errors.New("the name went between the create and the open")

// testHookTaken, when set, runs between CreateOrOpen's create that found
// the name taken and its open of what the name holds.
var testHookTaken func()

// CreateOrOpen is open(2) with O_CREAT of name in parent; flags are
// open(2)'s. It creates a new object (with mode and who, see Create) or,
// without O_EXCL, opens the file the name holds as open(2) would: cut to
// 0 bytes first for O_TRUNC, and a directory is EISDIR. A name taken at
// the create and gone at the open (evicted, unlinked or renamed away in
// between) is created after all, since open(O_CREAT) in a directory that
// exists never answers ENOENT; past createRaces such tries it answers
// ErrStale, which has the kernel look the name up again.
func (c *Core) CreateOrOpen(parent ID, name string, flags int, mode uint32, who Owner) (*Handle, How, error) {
	return c.CreateOrOpenBy(0, parent, name, flags, mode, who)
}

// CreateOrOpenBy is CreateOrOpen by client thread t (0: not known),
// whose process's last objects size a new object's reservation, and
// whose creates show whether it stores under final names (clients.go).
func (c *Core) CreateOrOpenBy(t Client, parent ID, name string, flags int, mode uint32, who Owner) (*Handle, How, error) {
	write := flags&unix.O_ACCMODE != unix.O_RDONLY
	for try := 0; ; try++ {
		h, err := c.create(t, parent, name, mode, who, write)
		if !errors.Is(err, ErrExists) || flags&unix.O_EXCL != 0 {
			return h, Created, err
		}
		if testHookTaken != nil {
			testHookTaken()
		}
		h, how, err := c.openTaken(parent, name, flags, write)
		switch {
		case !errors.Is(err, errGone):
			return h, how, err
		case try == createRaces:
			return nil, 0, ErrStale
		}
	}
}

// openTaken opens the file a name holds, for CreateOrOpen; errGone when
// there is none any more.
func (c *Core) openTaken(parent ID, name string, flags int, write bool) (*Handle, How, error) {
	e, _, err := c.Lookup(parent, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, 0, errGone
	case err != nil:
		return nil, 0, err
	case e.Dir:
		return nil, 0, ErrIsDir
	}
	how := Opened
	c.appending(e.ID, flags, write)
	if flags&unix.O_TRUNC != 0 {
		// By name, before the open: a writer opens the object at its
		// new size.
		if err := c.Truncate(Interrupt{}, e.ID, nil, 0); err != nil {
			return nil, 0, gone(err)
		}
		how = Truncated
	}
	h, err := c.openWhole(e.ID, c.storedFlags(flags), write, nil, how != Truncated)
	if err != nil {
		return nil, 0, gone(err)
	}
	if how == Truncated && write {
		c.cutAtOpen(e.ID)
	}
	return h, how, nil
}

// gone is err, or errGone when it says that the object a name was just
// found to hold has been dropped since (evicted, or its name removed).
func gone(err error) error {
	if errors.Is(err, ErrStale) {
		return errGone
	}
	return err
}

// storedFlags are the flags a stored file is opened with for a handle
// opened with open(2)'s flags. Creation and truncation are done already
// (by the kernel, or CreateOrOpen), append positioning is the kernel's,
// and O_DIRECT alignment is the client's business with the mount, not
// the store's. With passthrough every stored file is opened read-write:
// the kernel serves every handle of an inode through the first one's
// stored file, whatever the later ones may do.
func (c *Core) storedFlags(flags int) int {
	fl := flags &^ (unix.O_CREAT | unix.O_EXCL | unix.O_TRUNC | unix.O_APPEND | unix.O_DIRECT | unix.O_NOCTTY)
	if c.cfg.Passthrough || fl&unix.O_ACCMODE == unix.O_WRONLY {
		fl = fl&^unix.O_ACCMODE | unix.O_RDWR
	}
	return fl
}
