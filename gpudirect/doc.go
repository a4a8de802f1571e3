// Package gpudirect is kvfs's direct data path for loaders that move
// objects into GPU memory (LMCache's GDS backend, a NIXL GDS agent,
// Dynamo's KVBM). It is client side: it talks to the mount, never to the
// daemon's insides, and any program in any language can follow the same
// protocol (docs/gpudirect.md).
//
// The protocol, for one object:
//
//  1. open(2) the object through the mount, read-only. That handle is the
//     pin: kvfs never evicts an inode with an open handle, so the bytes
//     stay where they are until it is closed.
//  2. fgetxattr(2) "user.kvfs.backing" on that handle: the absolute path
//     of the stored file that holds the object's bytes.
//  3. open(2) that path with O_DIRECT (plain, when the store's file system
//     refuses O_DIRECT) and check it is the object of step 1: same size
//     and modification time as a fresh stat of the handle.
//  4. read it in large aligned chunks, several in flight, into
//     page-aligned, page-locked host buffers or, through NVIDIA cuFile,
//     straight into GPU memory.
//  5. close the stored file, then the handle: the pin is released.
//
// Permissions: every open is made with the caller's own credentials, and
// step 1 comes first, so nothing is reached through gpudirect that the
// caller could not read through the mount. kvfs mounts with
// default_permissions and reports each object's owner, group and mode as
// those of its stored file (the daemon creates it with the creator's uid
// and gid and the creation mode, and carries chmod and chown through), and
// the store's directories mirror the mount's with the same owners and
// modes; so the store's own check at step 3 is the mount's check again,
// plus the store directory's ancestors (only ever stricter).
//
// Writes follow the same route (docs/gpudirect.md has the rules):
//
//  1. the target directory's "user.kvfs.writes" must not be "daemon" (a
//     mount that passes every written byte through the daemon, with
//     --strict-capacity or without passthrough, takes no direct writes;
//     its daemon also names no stored file to a writer, EPERM);
//  2. open(2) the object through the mount for writing (O_WRONLY, with
//     O_CREAT, O_EXCL, O_TRUNC as wanted): kvfs admits the writer's
//     reservation, pins the object and marks it incomplete until close;
//  3. fgetxattr(2) "user.kvfs.backing" on that handle, open(2) the stored
//     file O_WRONLY|O_DIRECT and check it as for a read;
//  4. preallocate the stored file where the size is known, write the
//     whole blocks to it with O_DIRECT, several in flight, and a partial
//     last block through the handle on the mount; kvfs polls the stored
//     file's size and admits its growth;
//  5. close the stored file, stat the handle with AT_STATX_FORCE_SYNC (the
//     kernel's cached size is stale: the bytes went around the mount),
//     then close the handle: kvfs admits the object at its final size, or
//     fails that close with ENOSPC and removes it.
package gpudirect
