package fusefs

import "github.com/hanwen/go-fuse/v2/fs"

// Every go-fuse interface a node or handle implements, checked at compile
// time: a mistyped method would otherwise silently turn an operation off.
var (
	_ fs.NodeOnAdder       = (*dirNode)(nil)
	_ fs.NodeOnForgetter   = (*dirNode)(nil)
	_ fs.NodeLookuper      = (*dirNode)(nil)
	_ fs.NodeGetattrer     = (*dirNode)(nil)
	_ fs.NodeSetattrer     = (*dirNode)(nil)
	_ fs.NodeReaddirer     = (*dirNode)(nil)
	_ fs.NodeFsyncer       = (*dirNode)(nil)
	_ fs.NodeStatfser      = (*dirNode)(nil)
	_ fs.NodeGetxattrer    = (*dirNode)(nil)
	_ fs.NodeSetxattrer    = (*dirNode)(nil)
	_ fs.NodeRemovexattrer = (*dirNode)(nil)
	_ fs.NodeCreater       = (*dirNode)(nil)
	_ fs.NodeMknoder       = (*dirNode)(nil)
	_ fs.NodeSymlinker     = (*dirNode)(nil)
	_ fs.NodeMkdirer       = (*dirNode)(nil)
	_ fs.NodeRmdirer       = (*dirNode)(nil)
	_ fs.NodeUnlinker      = (*dirNode)(nil)
	_ fs.NodeRenamer       = (*dirNode)(nil)
	_ fs.NodeLinker        = (*dirNode)(nil)

	_ fs.NodeGetattrer     = (*fileNode)(nil)
	_ fs.NodeSetattrer     = (*fileNode)(nil)
	_ fs.NodeOpener        = (*fileNode)(nil)
	_ fs.NodeGetxattrer    = (*fileNode)(nil)
	_ fs.NodeSetxattrer    = (*fileNode)(nil)
	_ fs.NodeRemovexattrer = (*fileNode)(nil)

	_ fs.NodeGetattrer  = (*remoteNode)(nil)
	_ fs.NodeSetattrer  = (*remoteNode)(nil)
	_ fs.NodeOpener     = (*remoteNode)(nil)
	_ fs.NodeGetxattrer = (*remoteNode)(nil)

	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
	_ fs.FileLseeker   = (*handle)(nil)

	_ fs.FilePassthroughFder = (*passthroughHandle)(nil)
)
