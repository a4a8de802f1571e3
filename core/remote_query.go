package core

import "github.com/kvfs/kvfs/blob"

// Writers is how many handles have object id open for writing now. The
// remote tier reads an object for upload only while it is 0, and checks
// it again after the read: a writer that reopened the object meanwhile
// makes it start over.
func (c *Core) Writers(id blob.ID) int { return c.ledger.Writers(id) }

// BeingWritten says whether a writer has id open: its bytes are not
// complete, and the last writer's release publishes them.
func (c *Core) BeingWritten(id blob.ID) bool { return c.beingWritten(id) }
