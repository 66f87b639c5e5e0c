//! numpy's float32 matmul as the reference of `tpuemu bench gemm --numpy`: a child process from
//! the project's Python environment (see [`super::host::python`]) holding the operands, timing
//! one `a @ b` each time it is asked, so that its runs interleave with the emulated launches and
//! both see the same load on a shared machine (with a pause between them: `gemm::SETTLE`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::super::CliError;
use super::host::python;

/// The child: makes the operands, multiplies once to warm up, then times one product per line
/// read (an empty line ends it).
const SCRIPT: &str = "\
import sys, time
import numpy as np
m, n, k = (int(x) for x in sys.argv[1:4])
a = np.random.rand(m, k).astype(np.float32)
b = np.random.rand(k, n).astype(np.float32)
a @ b
print(np.__version__, flush=True)
for line in sys.stdin:
    if not line.strip():
        break
    t = time.perf_counter()
    a @ b
    print(time.perf_counter() - t, flush=True)
";

/// A numpy process ready to time `m x k @ k x n` float32 products.
pub struct Numpy {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// numpy's version.
    pub version: String,
}

impl Numpy {
    /// Starts the process and waits until it has multiplied once.
    pub fn start(m: u32, n: u32, k: u32) -> Result<Self, CliError> {
        let py = python();
        let mut child = Command::new(&py)
            .args(["-c", SCRIPT, &m.to_string(), &n.to_string(), &k.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| CliError::Other(format!("--numpy: cannot run {py}: {e}")))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut np = Numpy {
            child,
            stdin,
            stdout,
            version: String::new(),
        };
        np.version = np.line()?;
        Ok(np)
    }

    /// The next line the child printed, or its error output.
    fn line(&mut self) -> Result<String, CliError> {
        let mut s = String::new();
        let n = self
            .stdout
            .read_line(&mut s)
            .map_err(|e| CliError::Other(format!("--numpy: {e}")))?;
        if n == 0 {
            let mut err = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(CliError::Other(format!(
                "--numpy: {} ended (is numpy installed? set TPUEMU_PYTHON): {}",
                python(),
                err.trim()
            )));
        }
        Ok(s.trim().to_string())
    }

    /// Times one product: wall seconds.
    pub fn seconds(&mut self) -> Result<f64, CliError> {
        writeln!(self.stdin, "go")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| CliError::Other(format!("--numpy: {e}")))?;
        let s = self.line()?;
        s.parse()
            .map_err(|_| CliError::Other(format!("--numpy: unexpected output `{s}`")))
    }
}

impl Drop for Numpy {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin);
        let _ = self.child.wait();
    }
}
