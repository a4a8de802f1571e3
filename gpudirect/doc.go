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
// Writes through the direct path are not offered yet (the daemon settles
// a writer's charge at close, from the stored file's size, in a write
// path being rewritten); OpenFile takes the open flags so that they can
// be added without changing the API.
package gpudirect
