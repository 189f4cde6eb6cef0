//! Encodes and decodes a batch of messages (the demo grows into `krabka demo` as the workspace fills).
#![allow(clippy::unwrap_used)]

use krabka_protocol::Message;

fn main() {
    let n = 100_000;
    let mut buf = Vec::new();
    for i in 0..n {
        Message::new(format!("value-{i}"))
            .with_key(format!("key-{}", i % 100))
            .with_timestamp(1_700_000_000_000 + i)
            .encode(&mut buf);
    }
    let mut pos = 0;
    let mut count = 0;
    while pos < buf.len() {
        let (m, used) = Message::decode(&buf[pos..]).unwrap();
        assert_eq!(m.value, format!("value-{count}").as_bytes());
        pos += used;
        count += 1;
    }
    println!(
        "encoded and verified {count} messages ({} bytes)",
        buf.len()
    );
}
