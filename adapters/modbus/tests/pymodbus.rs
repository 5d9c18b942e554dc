//! Against a real Modbus TCP server that is not ours: pymodbus 3.8.6 (PyPI), installed by
//! `tests/peers/setup.sh` into `target/peers/modbus-venv`, serving a meter whose registers
//! change every 100 ms (`tests/modbus_meter.py`). Fails loudly, never skips, when it is missing.

use flexgate_modbus::{ModbusMeter, Order, ReadError, Register, Table, ValueType};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The pymodbus server, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("FLEXGATE_MODBUS_PYTHON") {
        return p.into();
    }
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/peers/modbus-venv/bin/python");
    assert!(
        venv.exists(),
        "pymodbus is not installed at {}: run `bash tests/peers/setup.sh --only modbus` (or the whole `bash tests/run.sh`)",
        venv.display()
    );
    venv
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn start_on(port: u16) -> Server {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/modbus_meter.py");
    let mut child = Command::new(python())
        .arg(&script)
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the pymodbus server starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("reads the server's first line");
    assert!(line.starts_with("listening"), "pymodbus server said {line:?}");
    Server {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    }
}

fn register(
    table: Table,
    address: u16,
    value_type: ValueType,
    word_order: Order,
    byte_order: Order,
    scale_to_kw: f64,
) -> Register {
    let r = Register {
        unit_id: 1,
        table,
        address,
        value_type,
        word_order,
        byte_order,
        scale_to_kw,
    };
    r.validate().expect("a valid map");
    r
}

fn schneider() -> Register {
    register(
        Table::Holding,
        3059,
        ValueType::Float32,
        Order::BigEndian,
        Order::BigEndian,
        1.0,
    )
}

#[tokio::test]
async fn changing_registers_read_the_same_kw_in_every_encoding() {
    let server = start_on(free_port());
    let mut meter = ModbusMeter::new(server.addr, Duration::from_secs(2));
    let maps = [
        ("PM5000 float32 kW", schneider()),
        (
            "SDM630 input float32 W",
            register(
                Table::Input,
                52,
                ValueType::Float32,
                Order::BigEndian,
                Order::BigEndian,
                0.001,
            ),
        ),
        (
            "int32 word-swapped 0.1 kW",
            register(
                Table::Holding,
                100,
                ValueType::Int32,
                Order::LittleEndian,
                Order::BigEndian,
                0.1,
            ),
        ),
        (
            "float64 byte-swapped kW",
            register(
                Table::Holding,
                200,
                ValueType::Float64,
                Order::BigEndian,
                Order::LittleEndian,
                1.0,
            ),
        ),
    ];
    let first = meter.read_kw(&schneider()).await.expect("a first reading");
    assert!((1000.0..1100.0).contains(&first), "{first}");
    for (name, map) in &maps {
        let kw = meter.read_kw(map).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        // The value rises 1 kW per 100 ms; the reads follow each other within a few steps.
        assert!(
            (kw - first).abs() <= 10.0 && kw >= first,
            "{name}: {kw} kW after {first} kW"
        );
    }
    // The registers change: later reads see a higher figure.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = meter.read_kw(&schneider()).await.expect("a later reading");
    assert!(later >= first + 3.0, "{first} then {later}");
    assert!(meter.is_connected(), "one connection serves every read");
}

#[tokio::test]
async fn an_exception_names_the_code_and_keeps_the_connection() {
    let server = start_on(free_port());
    let mut meter = ModbusMeter::new(server.addr, Duration::from_secs(2));
    let unmapped = register(
        Table::Holding,
        5000,
        ValueType::Float32,
        Order::BigEndian,
        Order::BigEndian,
        1.0,
    );
    match meter.read_kw(&unmapped).await {
        Err(ReadError::Exception {
            code, address, unit_id, ..
        }) => {
            assert_eq!((code, address, unit_id), (0x02, 5000, 1));
        }
        other => panic!("expected exception 0x02 (illegal data address), got {other:?}"),
    }
    let error = meter.read_kw(&unmapped).await.expect_err("still refused");
    assert!(error.to_string().contains("exception 0x02"), "{error}");
    assert!(meter.is_connected(), "an exception answer keeps the connection");
    assert!(
        meter.read_kw(&schneider()).await.is_ok(),
        "a mapped register reads on the same connection"
    );
}

#[tokio::test]
async fn a_meter_that_stops_answering_times_out_and_a_restarted_one_is_read_again() {
    let port = free_port();
    let server = start_on(port);
    let timeout = Duration::from_millis(500);
    let mut meter = ModbusMeter::new(server.addr, timeout);
    meter
        .read_kw(&schneider())
        .await
        .expect("reads while the meter answers");

    // Hung: the connection stays open, nothing comes back.
    let pid = server.child.id().to_string();
    let status = Command::new("kill").args(["-USR1", &pid]).status().expect("kill runs");
    assert!(status.success());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    match meter.read_kw(&schneider()).await {
        Err(ReadError::Timeout { after, .. }) => assert_eq!(after, timeout),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        started.elapsed() < timeout * 3,
        "bounded by the deadline: {:?}",
        started.elapsed()
    );
    assert!(!meter.is_connected(), "a timed-out connection is dropped");

    // Gone: refused at connect.
    drop(server);
    let error = meter.read_kw(&schneider()).await.expect_err("nobody listens");
    assert!(matches!(error, ReadError::Connect { .. }), "{error:?}");

    // Back on the same port: the next read reconnects.
    let _server = start_on(port);
    let kw = meter.read_kw(&schneider()).await.expect("reads after the restart");
    assert!((1000.0..1100.0).contains(&kw), "{kw}");
}
