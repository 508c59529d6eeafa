// Scratch (not committed): start a real control plane and hold it.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let with_kcm = std::env::args().any(|a| a == "--kcm");
    let mut cfg = control_plane::Config::default();
    if with_kcm {
        cfg = cfg.with_kcm(["*"]);
    }
    let cp = control_plane::ControlPlane::start(cfg).await?;
    println!("KUBECONFIG={}", cp.kubeconfig_path().display());
    println!("DIR={}", cp.dir().display());
    std::fs::write(
        "/tmp/deny-cp.kubeconfig.path",
        cp.kubeconfig_path().display().to_string(),
    )?;
    cp.write_kubeconfig_for("alice", "alice", &["devs"])?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}
