// Command etcd is etcd's own server entry point (go.etcd.io/etcd/server/v3
// etcdmain), built at the version k8s.io/kubernetes v1.36.3 requires, so the
// test bed's etcd is the one kube-apiserver 1.36 is released against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
