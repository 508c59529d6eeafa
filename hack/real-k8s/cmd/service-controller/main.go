// Command service-controller is upstream's service load-balancer controller
// (k8s.io/cloud-provider v0.36.3 controllers/service, what
// cloud-controller-manager runs) over the cloud-provider module's in-process
// fake cloud: the anchor that `make bench-real` measures protection-manager's
// service-lb-cleanup against, on the same real kube-apiserver.
//
// It runs the controller exactly as cloud-controller-manager does (shared
// informers for Services and Nodes, --concurrent-service-syncs workers, the
// node sync loop, Events), with one difference: the fake cloud is not safe
// for concurrent use (EnsureLoadBalancer writes a map without a lock), so its
// load-balancer calls are serialised by a mutex. The fake answers at once,
// so that costs the workers nothing measurable.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	fakecloud "k8s.io/cloud-provider/fake"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
)

// lockedCloud is the fake cloud with its load-balancer calls serialised.
type lockedCloud struct {
	*fakecloud.Cloud
	mu sync.Mutex
}

func (c *lockedCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	return c, true
}

func (c *lockedCloud) GetLoadBalancer(ctx context.Context, clusterName string, service *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Cloud.GetLoadBalancer(ctx, clusterName, service)
}

func (c *lockedCloud) GetLoadBalancerName(ctx context.Context, clusterName string, service *v1.Service) string {
	return c.Cloud.GetLoadBalancerName(ctx, clusterName, service)
}

func (c *lockedCloud) EnsureLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Cloud.EnsureLoadBalancer(ctx, clusterName, service, nodes)
}

func (c *lockedCloud) UpdateLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Cloud.UpdateLoadBalancer(ctx, clusterName, service, nodes)
}

func (c *lockedCloud) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *v1.Service) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Cloud.EnsureLoadBalancerDeleted(ctx, clusterName, service)
}

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server to run against (required)")
	workers := flag.Int("concurrent-service-syncs", 16, "workers syncing Services (cloud-controller-manager's --concurrent-service-syncs)")
	qps := flag.Float64("kube-api-qps", 20, "client QPS to the API server (cloud-controller-manager's default 20)")
	burst := flag.Int("kube-api-burst", 30, "client burst to the API server (cloud-controller-manager's default 30)")
	clusterName := flag.String("cluster-name", "kubernetes", "cluster name passed to the cloud")
	externalIP := flag.String("external-ip", "192.0.2.10", "ingress IP the fake cloud reports for every load balancer")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()

	if *showVersion {
		fmt.Printf("service-controller %s (k8s.io/cloud-provider controllers/service, fake cloud)\n", version.Get().GitVersion)
		return
	}
	if err := run(*kubeconfig, *workers, float32(*qps), *burst, *clusterName, *externalIP); err != nil {
		fmt.Fprintf(os.Stderr, "service-controller: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, workers int, qps float32, burst int, clusterName, externalIP string) error {
	if kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}
	ip := net.ParseIP(externalIP)
	if ip == nil {
		return fmt.Errorf("--external-ip %q is not an IP address", externalIP)
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading --kubeconfig %s: %w", kubeconfig, err)
	}
	config.QPS = qps
	config.Burst = burst
	config.UserAgent = "service-controller/" + version.Get().GitVersion
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("building a client for %s: %w", config.Host, err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cloud := &lockedCloud{Cloud: &fakecloud.Cloud{ExternalIP: ip}}
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := servicecontroller.New(
		cloud,
		client,
		factory.Core().V1().Services(),
		factory.Core().V1().Nodes(),
		clusterName,
		utilfeature.DefaultFeatureGate,
	)
	if err != nil {
		return fmt.Errorf("creating the service controller: %w", err)
	}
	factory.Start(ctx.Done())
	klog.Infof("service-controller %s: %d workers against %s", version.Get().GitVersion, workers, config.Host)
	controller.Run(ctx, workers, controllersmetrics.NewControllerManagerMetrics("service-controller"))
	factory.Shutdown()
	return nil
}
