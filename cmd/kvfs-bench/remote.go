package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfs/kvfs/internal/s3local"
	"github.com/kvfs/kvfs/remote"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// The remote rows (--workloads remote) measure the shared remote tier
// against a versitygw started for the run on the same disk, with a
// plain S3 client, or the tier kvfs uses (remote.Tier) on its own, as
// the baseline where there is one (s3baseline.go):
//   - a cold remote hit: open and read of an object through a freshly
//     mounted node that does not have it (lookup HEAD, GET into the
//     store, passthrough read), against a raw GET of it;
//   - a read of that object once local, against the same read of an
//     object stored on a mount without the tier;
//   - an fs_native store with the tier on (the upload runs behind)
//     against the same store with it off;
//   - an absent-name lookup through the mount: the first one costs a
//     HEAD round trip plus what, and the cached ones send nothing.
var (
	mRemoteCold   = metric{name: "remote cold hit 32MiB: open+read via a fresh mount vs raw GET", unit: "MB/s", higher: true, bar: 0.8}
	mRemoteLocal  = metric{name: "  read once fetched (tier on) vs stored on a local-only mount", unit: "MB/s", higher: true, bar: 0.9}
	mRemotePub    = metric{name: "fs_native publish 32MiB after its stat, one at a time: tier on vs off", unit: "ms/op", bar: 0.91, barTxt: " (within 10%)"}
	mRemoteStore  = metric{name: "  the whole store, its stat (the lookup's HEAD) included", unit: "ms/op"}
	mRemotePubB2B = metric{name: "  whole stores back to back, uploads running behind", unit: "ms/op"}
)

const (
	remoteBucketPrefix = "bench"
	// warmPasses is how many times the read-once-local row reads its
	// object per measurement.
	warmPasses = 8
)

// remoteBench is what the remote rows run on.
type remoteBench struct {
	b   *bench
	srv *s3local.Server
	// unmountS3 removes the server's tmpfs.
	unmountS3 func()
	base      s3Baseline // the bench's own clients of the bucket
	on        *target    // a mount with the tier (node A)
	off       *target    // a mount without it
	flags     []string   // the --remote flags of a node
}

func (b *bench) remoteRows() error {
	rb, err := b.startRemoteBench()
	if rb != nil {
		defer rb.close()
	}
	if errors.Is(err, errNoS3Server) {
		b.skipRow(mRemoteCold.name, err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	for _, f := range []func() error{rb.coldHits, rb.publish, rb.absentLookups} {
		if err := f(); err != nil {
			return err
		}
	}
	for _, t := range []*target{rb.on, rb.off} {
		b.accounting(t, true)
	}
	return nil
}

var errNoS3Server = errors.New("no S3 server (versitygw: make s3server)")

// startRemoteBench starts the server, the bench's client and the two
// long-lived mounts; close undoes whatever it did.
func (b *bench) startRemoteBench() (*remoteBench, error) {
	rb := &remoteBench{b: b}
	dir := filepath.Join(b.work, "s3")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	// The server stands in for one across the network: on kvfs's own disk
	// its writes (and fsyncs) of every upload would stall the very
	// stores the rows time. As root it gets a tmpfs of its own.
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4g"); err == nil {
		rb.unmountS3 = func() { unix.Unmount(dir, unix.MNT_DETACH) }
	} else {
		b.note("remote rows: the S3 server shares kvfs's disk (no tmpfs for it: %v); its writes are noise in the publish rows", err)
	}
	srv, err := s3local.Launch(dir)
	if err != nil {
		return rb, fmt.Errorf("%w: %v", errNoS3Server, err)
	}
	rb.srv = srv
	b.progress("versitygw serving %s at %s", dir, srv.Endpoint)
	rb.flags = []string{"--remote", srv.URL(remoteBucketPrefix), "--remote-endpoint", srv.Endpoint,
		"--remote-access-key", s3local.AccessKey, "--remote-secret-key", s3local.SecretKey, "--remote-region", s3local.Region}
	rb.base = s3Baseline{bucket: srv.Bucket, prefix: remoteBucketPrefix}
	if rb.base.client, err = srv.Client(); err != nil {
		return rb, err
	}
	cfg := remote.Config{URL: srv.URL(remoteBucketPrefix), Endpoint: srv.Endpoint, AccessKey: s3local.AccessKey,
		SecretKey: s3local.SecretKey, Region: s3local.Region}
	if err := cfg.Finish(func(string) string { return "" }); err != nil {
		return rb, err
	}
	noUploads := func(string) (remote.Source, error) { return nil, remote.ErrNotFound }
	if rb.base.tier, err = remote.New(cfg, remote.Deps{JournalDir: filepath.Join(b.work, "bench-journal"), Open: noUploads}); err != nil {
		return rb, err
	}
	if rb.on, err = rb.mount("remote-a", rb.flags...); err != nil {
		return rb, err
	}
	rb.off, err = rb.mount("local")
	return rb, err
}

// mount starts a kvfs node of the remote rows.
func (rb *remoteBench) mount(name string, extra ...string) (*target, error) {
	b := rb.b
	t, err := b.startNode("kvfs-"+name, name, name, b.cfg.capacity, extra...)
	if err != nil {
		return nil, err
	}
	if err := t.d.waitMounted(b.cfg.mountTimeout); err != nil {
		b.stopTarget(t)
		return nil, err
	}
	return t, nil
}

func (rb *remoteBench) close() {
	for _, t := range []*target{rb.on, rb.off} {
		if t != nil {
			rb.b.stopTarget(t)
		}
	}
	if rb.base.tier != nil {
		rb.base.tier.Close()
	}
	if rb.srv != nil {
		rb.srv.Close()
	}
	if rb.unmountS3 != nil {
		rb.unmountS3()
	}
}

// coldHits: per round a new object in the bucket, a fresh node, the raw
// GET and the node's open+read in alternating order, then reads of the
// fetched object against the local-only mount's.
func (rb *remoteBench) coldHits() error {
	b := rb.b
	local := rb.off.path("local.data")
	if err := storeNative(local, b.data); err != nil {
		return err
	}
	var raw, cold, warm, localWarm []float64
	for r := 0; r < b.cfg.rounds; r++ {
		name := fmt.Sprintf("cold-%d.data", r)
		if err := rb.base.tier.Put(b.ctx, name, bytes.NewReader(b.data)); err != nil {
			return fmt.Errorf("seeding %s: %w", name, err)
		}
		node, err := rb.mount(fmt.Sprintf("remote-b%d", r), rb.flags...)
		if err != nil {
			return err
		}
		g, c, err := rb.coldPair(node, name, r%2 == 0)
		if err == nil {
			raw, cold = append(raw, g), append(cold, c)
			var w, l float64
			if w, l, err = rb.warmPair(node.path(name), local, r%2 == 0); err == nil {
				warm, localWarm = append(warm, w), append(localWarm, l)
			}
		}
		b.stopTarget(node)
		if err != nil {
			return err
		}
		b.progress("%s | round %d/%d raw GET %s, kvfs %s MB/s; once local %s vs local-only %s MB/s", mRemoteCold.name,
			r+1, b.cfg.rounds, num(raw[r], true), num(cold[r], true), num(warm[r], true), num(localWarm[r], true))
	}
	b.pairRow(mRemoteCold, "remote", raw, cold, nil)
	b.pairRow(mRemoteLocal, "remote", localWarm, warm, nil)
	return nil
}

// coldPair times a raw GET of name and the fresh node's open+read of it
// (the node's first sight of it: lookup, fetch, read), then checks the
// bytes the node served.
func (rb *remoteBench) coldPair(node *target, name string, rawFirst bool) (raw, cold float64, err error) {
	b := rb.b
	size := int64(len(b.data))
	getRaw := func() error {
		start := time.Now()
		n, err := rb.base.rawGet(b.ctx, name, io.Discard)
		if err == nil && n != size {
			err = fmt.Errorf("raw GET of %s: %d bytes", name, n)
		}
		raw = mbps(size, time.Since(start))
		return err
	}
	readNode := func() error {
		start := time.Now()
		err := readWhole(node.path(name), b.buf)
		cold = mbps(size, time.Since(start))
		return err
	}
	order := []func() error{readNode, getRaw}
	if rawFirst {
		order = []func() error{getRaw, readNode}
	}
	for _, f := range order {
		if err := f(); err != nil {
			return 0, 0, err
		}
	}
	return raw, cold, verifyObject(node.path(name), b.data, b.buf)
}

// warmPair reads the fetched object and the local-only one warmPasses
// times each (page cache warm from the first read), MB/s.
func (rb *remoteBench) warmPair(fetched, local string, fetchedFirst bool) (float64, float64, error) {
	b := rb.b
	measure := func(p string) (float64, error) {
		if err := readWhole(p, b.buf); err != nil {
			return 0, err
		}
		start := time.Now()
		for range warmPasses {
			if err := readWhole(p, b.buf); err != nil {
				return 0, err
			}
		}
		return mbps(warmPasses*int64(len(b.buf)), time.Since(start)), nil
	}
	paths := []string{local, fetched}
	if fetchedFirst {
		paths = []string{fetched, local}
	}
	v := map[string]float64{}
	for _, p := range paths {
		x, err := measure(p)
		if err != nil {
			return 0, 0, err
		}
		v[p] = x
	}
	return v[fetched], v[local], nil
}

// publish times fs_native stores on the node with the tier and on the
// one without, alternating, two ways. One at a time, with the tier's
// queue drained and the disk flushed before each: the cost the tier adds
// to the store itself, split into the publish (temp file, writes, close,
// link, unlink: the journal entry, the link's lookup answered from the
// tier's memory) and the stat before it (the read-through lookup, one
// HEAD: its own row below). Back to back: the uploads running behind
// compete for the CPUs and the disk (here the server shares them too).
func (rb *remoteBench) publish() error {
	b := rb.b
	var on, off, onAll, offAll, onB2B, offB2B []float64
	for r := 0; r < b.cfg.rounds; r++ {
		targets := []*target{rb.on, rb.off}
		if r%2 == 1 {
			targets = []*target{rb.off, rb.on}
		}
		for _, t := range targets {
			pub, all, err := rb.storeRound(t, r, true)
			if err != nil {
				return err
			}
			_, b2b, err := rb.storeRound(t, r, false)
			if err != nil {
				return err
			}
			if t == rb.on {
				on, onAll, onB2B = append(on, pub), append(onAll, all), append(onB2B, b2b)
			} else {
				off, offAll, offB2B = append(off, pub), append(offAll, all), append(offB2B, b2b)
			}
		}
		b.progress("%s | round %d/%d tier on %.2f ms (%.2f with the stat), off %.2f (%.2f); back to back: on %.2f, off %.2f",
			mRemotePub.name, r+1, b.cfg.rounds, on[r], onAll[r], off[r], offAll[r], onB2B[r], offB2B[r])
	}
	b.pairRow(mRemotePub, "remote", off, on, nil)
	b.pairRow(mRemoteStore, "remote", offAll, onAll, nil)
	b.pairRow(mRemotePubB2B, "remote", offB2B, onB2B, nil)
	st, err := rb.on.d.stats()
	if err == nil && st.RemoteStats != nil {
		rs := st.RemoteStats
		b.note("tier-on node: %d uploads (%d bytes), %d already present, %d failed attempts, %d dropped, %d HEADs",
			rs.Uploads, rs.UploadedBytes, rs.AlreadyPresent, rs.UploadFailures, rs.UploadDropped, rs.Heads)
		b.note("tier-on node: %s of the stored file per upload (%d reads for %d uploads; %d cut by a change, %d refused for good, %d deletes)",
			readsPerUpload(rs.UploadReads, rs.Uploads), rs.UploadReads, rs.Uploads, rs.UploadChanged, rs.Rejected, rs.Deletes)
	}
	return err
}

// readsPerUpload says how many times each upload read its object.
func readsPerUpload(reads, uploads int64) string {
	if uploads == 0 {
		return "no read"
	}
	return fmt.Sprintf("%.2f reads", float64(reads)/float64(uploads))
}

// storeRound is storeObjects fs_native stores, one at a time (the tier's
// queue drained and the disk flushed, untimed, before each) or back to
// back: ms per publish (after the stat) and per whole store. The objects
// are then deleted from the node and the bucket (untimed).
func (rb *remoteBench) storeRound(t *target, round int, alone bool) (pub, all float64, err error) {
	b := rb.b
	sub := fmt.Sprintf("pub-%d-%v", round, alone)
	dir := t.path(sub)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	finals := make([]string, b.cfg.storeObjects)
	for i := range finals {
		finals[i] = filepath.Join(dir, fmt.Sprintf("%08x%04d.data", round+1, i))
	}
	if err := rb.uploadsDone(); err != nil {
		return 0, 0, err
	}
	syncFS(b.work)
	var stats, pubs time.Duration
	for _, f := range finals {
		if alone {
			if err := rb.uploadsDone(); err != nil {
				return 0, 0, err
			}
			syncFS(b.work)
		}
		s, p, err := timedStore(f, b.data)
		if err != nil {
			return 0, 0, err
		}
		stats, pubs = stats+s, pubs+p
	}
	if t == rb.on {
		if err := rb.uploadsDone(); err != nil {
			return 0, 0, err
		}
		for _, f := range finals {
			rb.base.client.RemoveObject(b.ctx, rb.srv.Bucket, rb.base.key(sub+"/"+filepath.Base(f)), minio.RemoveObjectOptions{})
		}
	}
	n := float64(len(finals))
	return pubs.Seconds() * 1e3 / n, (stats + pubs).Seconds() * 1e3 / n, b.removeAll(dir, finals)
}

// timedStore is storeNative timed in two parts: its stat of the final
// name, and the publish after it.
func timedStore(final string, data []byte) (stat, pub time.Duration, err error) {
	var st unix.Stat_t
	start := time.Now()
	if err := unix.Stat(final, &st); err != unix.ENOENT {
		return 0, 0, fmt.Errorf("stat %s before the store: %v", final, err)
	}
	mid := time.Now()
	err = publishNative(final, data)
	return mid.Sub(start), time.Since(mid), err
}

// uploadsDone waits (untimed) until the tier-on node has nothing
// pending.
func (rb *remoteBench) uploadsDone() error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st, err := rb.on.d.stats()
		if err != nil {
			return err
		}
		if st.RemoteStats == nil {
			return errors.New("the tier-on node reports no remote stats")
		}
		if st.RemoteStats.QueueDepth == 0 {
			return nil
		}
		if time.Now().After(deadline) || rb.b.ctx.Err() != nil {
			return fmt.Errorf("uploads still pending: %+v", *st.RemoteStats)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// absentLookups: per round, the raw HEAD round trip of an absent key
// with the tier's client, then the first stat of each of absentNames
// other absent names through the tier-on mount, then statOps/10 stats of
// one of them while the tier remembers it absent; HEADs are counted in
// the server's own log.
func (rb *remoteBench) absentLookups() error {
	b := rb.b
	var extra, cached, tierCached []float64
	var heads, cachedHeads int
	for r := 0; r < b.cfg.rounds; r++ {
		cost, err := rb.base.absentLookup(b.ctx, fmt.Sprintf("probe-%d.data", r), 20)
		if err != nil {
			return err
		}
		var firsts []float64
		for i := range absentNames {
			name := fmt.Sprintf("absent-%d-%d.data", r, i)
			first, err := statAbsent(rb.on.path(name), 1)
			if err != nil {
				return err
			}
			n, err := rb.srv.Requests("HEAD", rb.base.key(name))
			if err != nil {
				return err
			}
			heads += n
			firsts = append(firsts, float64(first))
		}
		name := fmt.Sprintf("absent-%d-0.data", r)
		per, err := statAbsent(rb.on.path(name), max(b.cfg.statOps/10, 100))
		if err != nil {
			return err
		}
		n, err := rb.srv.Requests("HEAD", rb.base.key(name))
		if err != nil {
			return err
		}
		cachedHeads += n - 1
		first := time.Duration(median(firsts))
		extra = append(extra, float64(first-cost.rawHead)/1e3)
		cached, tierCached = append(cached, float64(per)/1e3), append(tierCached, float64(cost.cached)/1e3)
		b.progress("absent-name lookup | round %d/%d raw HEAD %v, first stat %v (median of %d), cached stat %v (tier alone %v)",
			r+1, b.cfg.rounds, cost.rawHead, first, absentNames, per, cost.cached)
	}
	b.absRow("absent-name lookup via the mount: first stat minus a raw HEAD", "us", extra, 1000,
		fmt.Sprintf("%d HEADs for %d first lookups", heads, absentNames*b.cfg.rounds))
	b.absRow("  then each stat while remembered absent (a FUSE round trip)", "us/op", cached, 0,
		fmt.Sprintf("%d HEADs sent; the tier's own cached Lookup: %s us", cachedHeads, num(median(tierCached), true)))
	b.check("%s remote: %d HEADs for %d first absent-name lookups, %d while cached",
		passFail(heads == absentNames*b.cfg.rounds && cachedHeads == 0), heads, absentNames*b.cfg.rounds, cachedHeads)
	return nil
}

// absentNames is how many absent names a round of absentLookups looks
// up for the first time.
const absentNames = 10

// statAbsent stats an absent path n times and returns the time per
// stat; any answer but ENOENT is an error.
func statAbsent(p string, n int) (time.Duration, error) {
	var st unix.Stat_t
	start := time.Now()
	for range n {
		if err := unix.Stat(p, &st); err != unix.ENOENT {
			return 0, fmt.Errorf("stat of absent %s: %v", p, err)
		}
	}
	return time.Since(start) / time.Duration(n), nil
}
