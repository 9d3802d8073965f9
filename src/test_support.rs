//! Test-only helpers shared by every floor's tests: the custom resources as the API server stores
//! them, a moto server for the real backends, a wiremock server, and pauses that stop a fake's
//! call once it has acted.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The checkout under test, read when the test runs: a binary cargo reuses from another checkout
/// of the same shared target dir would otherwise read that checkout.
pub(crate) fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")
}

/// A moto server (S3 and RDS) on 127.0.0.1 for tests of the real backends, killed when dropped.
pub(crate) struct MotoServer {
    child: Child,
    port: u16,
}

/// `KEEPER_MOTO_SERVER` if set (then it must work), else `moto_server` on PATH.
fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KEEPER_MOTO_SERVER") {
        return Some(path.into());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("moto_server"))
        .find(|candidate| candidate.is_file())
}

impl MotoServer {
    /// Starts moto on a free port with `extra` arguments (such as TLS flags). A missing moto
    /// fails `test` with a message saying how to install it: it never skips silently.
    pub(crate) fn start(test: &str, extra: &[&str]) -> MotoServer {
        let Some(binary) = binary() else {
            panic!(
                "{test} needs moto: moto_server is not on PATH and KEEPER_MOTO_SERVER is not set. \
                 Install it with `make deps-moto` (or `e2e/stack.sh deps-moto`) and run the tests \
                 with `make unit`, or set KEEPER_MOTO_SERVER=$(e2e/stack.sh moto-path)"
            );
        };
        // Port 0: moto binds a port the kernel picks and prints it. A port picked here and
        // handed over could be picked again by a test running beside this one before moto binds
        // it: the second moto would exit and both tests would talk to the first.
        let mut child = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", "0"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let stderr = child.stderr.take().expect("piped stderr");
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        // Reads moto's log to the end: a full pipe would stop moto at its next request line.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(port) = line
                    .split_once(" * Running on ")
                    .and_then(|(_, url)| url.rsplit_once(':'))
                    .and_then(|(_, port)| port.trim().parse::<u16>().ok())
                {
                    let _ = port_tx.send(port);
                }
            }
        });
        let mut server = MotoServer { child, port: 0 };
        server.port = match port_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(port) => port,
            Err(_) => match server.child.try_wait().expect("moto status") {
                Some(status) => panic!("moto_server exited early with {status}"),
                None => panic!("moto_server did not say which port it listens on in 60 s"),
            },
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, server.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen on {}",
                server.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// The server's URL with `scheme` (`https` when started with TLS flags).
    pub(crate) fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.port)
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A wiremock server on 127.0.0.1 (not every address the host has).
pub(crate) async fn mock_server() -> wiremock::MockServer {
    wiremock::MockServer::builder()
        .listener(TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap())
        .start()
        .await
}

/// A call of a fake backend stopped after it acted, so that a test can run another reconcile in
/// between, as a second keeper would.
#[derive(Clone, Default)]
pub struct Pause {
    reached: Arc<Notify>,
    release: Arc<Notify>,
}

impl Pause {
    /// Waits until the call has acted and stopped.
    pub async fn reached(&self) {
        self.reached.notified().await;
    }

    /// Lets the call return.
    pub fn release(&self) {
        self.release.notify_one();
    }
}

/// The pauses a fake backend's calls take, each once.
#[derive(Default)]
pub struct Pauses(Mutex<Vec<(&'static str, Pause)>>);

impl Pauses {
    /// The next `call` stops once it has acted, until the returned pause is released.
    pub fn after(&self, call: &'static str) -> Pause {
        let pause = Pause::default();
        self.0.lock().expect("lock").push((call, pause.clone()));
        pause
    }

    /// Called by the fake once `call` has acted.
    pub async fn stop_if_asked(&self, call: &str) {
        let pause = {
            let mut pauses = self.0.lock().expect("lock");
            let at = pauses.iter().position(|(c, _)| *c == call);
            at.map(|at| pauses.remove(at).1)
        };
        if let Some(pause) = pause {
            pause.reached.notify_one();
            pause.release.notified().await;
        }
    }
}

/// An S3Tenant `name` in namespace `ns` with `spec` (JSON, as in a manifest; what it leaves out
/// takes the CRD's defaults).
pub(crate) fn tenant(name: &str, spec: serde_json::Value) -> crate::api::S3Tenant {
    let mut tenant = crate::api::S3Tenant::new(name, serde_json::from_value(spec).expect("spec"));
    tenant.metadata.namespace = Some("ns".into());
    tenant
}

/// An S3Bucket `name` in namespace `ns` of S3Tenant `tenant`, with the CRD's defaults.
pub(crate) fn bucket(name: &str, tenant: &str) -> crate::api::S3Bucket {
    bucket_with(name, serde_json::json!({"tenantRef": {"name": tenant}}))
}

/// An S3Bucket `name` in namespace `ns` with `spec` (JSON, as in a manifest).
pub(crate) fn bucket_with(name: &str, spec: serde_json::Value) -> crate::api::S3Bucket {
    let mut bucket = crate::api::S3Bucket::new(name, serde_json::from_value(spec).expect("spec"));
    bucket.metadata.namespace = Some("ns".into());
    bucket
}
