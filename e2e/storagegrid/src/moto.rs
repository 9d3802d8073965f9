//! Starts a private moto server for a test and stops it when dropped.
//!
//! The executable comes from `KEEPER_MOTO_SERVER` (path to `moto_server`), default `moto_server`
//! on `PATH`. It listens on a free 127.0.0.1 port.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running moto server child process (killed on drop).
pub struct MotoServer {
    child: Child,
    endpoint: String,
}

impl MotoServer {
    /// Spawns moto on a free loopback port and waits until it answers HTTP (up to 60 s).
    pub async fn start() -> anyhow::Result<MotoServer> {
        let exe = std::env::var("KEEPER_MOTO_SERVER").unwrap_or_else(|_| "moto_server".to_owned());
        let mut last_err = None;
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let child = Command::new(&exe)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot start {exe}: {e}. These tests need moto: install it with \
                         `make deps-moto` (or `e2e/stack.sh deps-moto`) and set \
                         KEEPER_MOTO_SERVER=$(e2e/stack.sh moto-path) (`make unit` does)"
                    )
                })?;
            let mut server = MotoServer {
                child,
                endpoint: format!("http://127.0.0.1:{port}"),
            };
            match server.wait_ready(Duration::from_secs(60)).await {
                Ok(()) => return Ok(server),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("moto did not start")))
    }

    async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let addr = self.endpoint.trim_start_matches("http://").to_owned();
        loop {
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("moto exited early: {status}");
            }
            if let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let req =
                    format!("GET /moto-api/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
                if s.write_all(req.as_bytes()).await.is_ok() {
                    let mut buf = [0u8; 12];
                    if s.read_exact(&mut buf).await.is_ok() && buf.starts_with(b"HTTP/1.") {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                anyhow::bail!("moto at {} not ready after {timeout:?}", self.endpoint);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// e.g. `http://127.0.0.1:40321`
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
