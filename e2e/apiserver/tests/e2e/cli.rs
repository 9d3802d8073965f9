//! The `keeper-e2e-apiserver` binary's CLI contract.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn binary_writes_kubeconfig_prints_url_and_exits_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let ready = dir.path().join("ready");
    let mut child = Command::new(env!("CARGO_BIN_EXE_keeper-e2e-apiserver"))
        .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kc)
        .arg("--ready-file")
        .arg(&ready)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .expect("listening line")
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ready.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(std::fs::read_to_string(&ready).unwrap(), url);
    let kubeconfig = std::fs::read_to_string(&kc).unwrap();
    // The same port speaks HTTPS, which kubectl needs to send the admin token.
    let https = url.replacen("http://", "https://", 1);
    assert!(
        kubeconfig.contains(&format!("server: {https}"))
            && kubeconfig.contains("certificate-authority-data: ")
            && kubeconfig.contains("current-context: keeper-dev"),
        "{kubeconfig}"
    );
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kc)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args(["get", "ns", "kube-system", "-o", "name"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "namespace/kube-system",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "server did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn binary_refuses_non_loopback_listen() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_keeper-e2e-apiserver"))
        .args(["--listen", "0.0.0.0:0", "--kubeconfig"])
        .arg(dir.path().join("kc"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
}
