//! The `keeper-e2e-storagegrid` binary: CLI contract, ready file, SIGTERM exit.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keeper_e2e_storagegrid::moto::MotoServer;

#[tokio::test]
async fn binary_serves_writes_ready_file_and_exits_on_sigterm() {
    let moto = MotoServer::start().await.expect("moto");
    let dir = std::env::temp_dir().join(format!("keeper-sg-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ready = dir.join("ready.json");
    let _ = std::fs::remove_file(&ready);
    let mut child = Command::new(env!("CARGO_BIN_EXE_keeper-e2e-storagegrid"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--s3-listen",
            "127.0.0.1:0",
            "--moto-endpoint",
            moto.endpoint(),
            "--admin-user",
            "root",
            "--admin-password",
            "cli-pass",
            "--token-ttl",
            "1h",
            "--drain-rate",
            "500",
            "--ready-file",
            ready.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn binary");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let l1 = lines.next().unwrap().unwrap();
    let l2 = lines.next().unwrap().unwrap();
    let mgmt = l1.strip_prefix("management on ").expect(&l1).to_owned();
    let s3 = l2.strip_prefix("s3 on ").expect(&l2).to_owned();
    assert!(mgmt.starts_with("http://127.0.0.1:"));
    assert!(s3.starts_with("http://127.0.0.1:"));

    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&ready).unwrap()).unwrap();
    assert_eq!(doc["management"], mgmt.as_str());
    assert_eq!(doc["s3"], s3.as_str());

    let http = reqwest::Client::new();
    let r = http
        .post(format!("{mgmt}/api/v4/authorize"))
        .json(&serde_json::json!({"username":"root","password":"cli-pass"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let cc = r.headers()["cache-control"].to_str().unwrap().to_owned();
    assert!(cc.contains("max-age=3599"), "--token-ttl 1h: {cc}");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("binary did not exit on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(exit.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn binary_refuses_non_loopback_listeners() {
    let out = Command::new(env!("CARGO_BIN_EXE_keeper-e2e-storagegrid"))
        .args([
            "--listen",
            "0.0.0.0:0",
            "--moto-endpoint",
            "http://127.0.0.1:1",
            "--admin-password",
            "x",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!out.success());
}
