package blob

import (
	"cmp"
	"iter"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// kids are a directory's names. They are split by a hash of the name into
// buckets that each hold one range of hashes (extendible hashing: a table
// of 1<<depth slots indexed by the hash's top bits, a bucket filling
// 1<<(depth-bucket.depth) adjacent slots), so that a listing can resume
// after any hash by reading a bucket or two, not the whole directory:
// ListPage's cost, and the time it holds the caller's lock, is bounded by
// the page, at ten names or ten million.
//
// The listing order is the hash's, then the name's: a total order on
// names that inserts and deletes do not change (only a bucket's split
// does, and a split keeps the order), so a reader that resumes after a
// cookie sees every name present for its whole listing exactly once, as
// ext4's hash-ordered readdir does.
type kids struct {
	depth uint8
	slots []*bucket
	n     int
	// gen counts the changes of names here (see Version); read without
	// the owner's lock.
	gen atomic.Uint64
}

type bucket struct {
	depth uint8
	names map[string]ID
}

const (
	// bucketMax is the most names a bucket holds before it splits.
	bucketMax = 512
	// maxDepth caps the table (1<<maxDepth slots, 32 MiB); past it, names
	// whose hashes share their top bits only make buckets larger.
	maxDepth = 22
	// cookieBits: a cookie fits a signed 64-bit directory offset (the
	// kernel's loff_t) with room for the offsets of "." and "..".
	cookieBits = 62
)

// newKids makes an empty table sized for about hint names.
func newKids(hint int) *kids {
	depth := uint8(0)
	for hint > bucketMax<<depth && depth < maxDepth {
		depth++
	}
	k := &kids{depth: depth, slots: make([]*bucket, 1<<depth)}
	per := hint >> depth
	for i := range k.slots {
		k.slots[i] = &bucket{depth: depth, names: make(map[string]ID, per)}
	}
	return k
}

// hashName is a name's place in the listing order, below 1<<cookieBits.
func hashName(name string) uint64 {
	return xxhash.Sum64String(name) >> (64 - cookieBits)
}

func (k *kids) slot(h uint64) int {
	return int(h >> (cookieBits - uint(k.depth)) & (1<<k.depth - 1))
}

func (k *kids) len() int { return k.n }

// lookup finds name's ID.
func (k *kids) lookup(name string) (ID, bool) {
	id, ok := k.slots[k.slot(hashName(name))].names[name]
	return id, ok
}

// get is name's ID, 0 when it is not there.
func (k *kids) get(name string) ID {
	id, _ := k.lookup(name)
	return id
}

// set names id, and reports whether name was new.
func (k *kids) set(name string, id ID) bool {
	h := hashName(name)
	b := k.slots[k.slot(h)]
	n := len(b.names)
	b.names[name] = id // one hash of the name, not a lookup and then a store
	k.gen.Add(1)
	if len(b.names) == n {
		return false
	}
	k.n++
	if len(b.names) > bucketMax && b.depth < maxDepth {
		k.split(b, h)
	}
	return true
}

// del removes name. Buckets never merge: a directory that shrank lists
// a few empty buckets.
func (k *kids) del(name string) {
	b := k.slots[k.slot(hashName(name))]
	if _, ok := b.names[name]; ok {
		delete(b.names, name)
		k.n--
		k.gen.Add(1)
	}
}

// split halves b, which holds the hash h, doubling the table first when
// b fills one slot.
func (k *kids) split(b *bucket, h uint64) {
	if b.depth == k.depth {
		slots := make([]*bucket, 2*len(k.slots))
		for i, s := range k.slots {
			slots[2*i], slots[2*i+1] = s, s
		}
		k.slots, k.depth = slots, k.depth+1
	}
	lo := &bucket{depth: b.depth + 1, names: make(map[string]ID, len(b.names)/2)}
	hi := &bucket{depth: b.depth + 1, names: make(map[string]ID, len(b.names)/2)}
	bit := uint64(1) << (cookieBits - 1 - uint(b.depth))
	for name, id := range b.names {
		if hashName(name)&bit == 0 {
			lo.names[name] = id
		} else {
			hi.names[name] = id
		}
	}
	span := 1 << (k.depth - b.depth)
	first := k.slot(h) &^ (span - 1)
	for i := range span {
		k.slots[first+i] = lo
		if i >= span/2 {
			k.slots[first+i] = hi
		}
	}
}

// all yields every name, in no order.
func (k *kids) all() iter.Seq2[string, ID] {
	return func(yield func(string, ID) bool) {
		for i, b := range k.slots {
			if i > 0 && k.slots[i-1] == b {
				continue
			}
			for name, id := range b.names {
				if !yield(name, id) {
					return
				}
			}
		}
	}
}

// page appends to out the names after cookie (0: from the start) in
// listing order, whole buckets at a time until it holds at least max
// names, and reports whether names may follow. Names of one hash are
// always in one bucket, so a page never splits them.
func (k *kids) page(out []pageEntry, after uint64, max int) ([]pageEntry, bool) {
	first := 0
	if after > 0 {
		first = k.slot(after - 1)
	}
	start := len(out)
	for i := first; i < len(k.slots); i++ {
		if len(out)-start >= max {
			return sortPage(out, start), true
		}
		// A bucket spans slots: read it at its first, or at the one
		// the listing resumes in (a reader's buffer ended inside it, a
		// seekdir), which need not be its first.
		b := k.slots[i]
		if i > first && k.slots[i-1] == b {
			continue
		}
		for name, id := range b.names {
			if c := hashName(name) + 1; c > after {
				out = append(out, pageEntry{c, name, id})
			}
		}
	}
	return sortPage(out, start), false
}

// pageEntry is a name with its cookie: its hash plus one, so that no
// cookie is 0, the start.
type pageEntry struct {
	cookie uint64
	name   string
	id     ID
}

func sortPage(out []pageEntry, start int) []pageEntry {
	slices.SortFunc(out[start:], func(a, b pageEntry) int {
		if a.cookie != b.cookie {
			return cmp.Compare(a.cookie, b.cookie)
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}
