//! The stdin side of `produce`: lines to messages, appended as they come or, with
//! `--all-or-nothing`, only once the whole input is checked.

use std::io::{BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::sync::mpsc::{Receiver, RecvTimeoutError};

use krabka_protocol::Message;
use krabka_protocol::batch::record_size;
use krabka_storage::segment::BATCH_HEADER_LEN;

use super::{Appender, BATCH, Stop};
use crate::{escape, human, interrupt};

/// How each line of stdin becomes a message.
pub struct LineFormat<'a> {
    /// `--key-separator`: the key is what comes before its first occurrence.
    pub key_separator: Option<&'a str>,
    /// `--escaped`: key and value hold `krabka read`'s escapes, and a key `-` is no key.
    pub escaped: bool,
    /// The largest message the log accepts, measured as the log does: as a record batch of
    /// that one record, header included.
    pub max_message_bytes: u64,
}

impl LineFormat<'_> {
    /// The message of one line (without its `\n`; a `\r` before it is part of the value).
    ///
    /// # Errors
    /// Why the line is not a valid record: invalid UTF-8, a bad escape, too large.
    pub fn message(&self, line: &[u8]) -> Result<Message, String> {
        let line = std::str::from_utf8(line)
            .map_err(|e| format!("invalid UTF-8 (byte {} of the line)", e.valid_up_to() + 1))?;
        let (key, value) = match self.key_separator.and_then(|sep| line.split_once(sep)) {
            Some((key, value)) => (Some(key), value),
            None => (None, line),
        };
        let msg = if self.escaped {
            let value = escape::unescape(value).map_err(|e| format!("in the value: {e}"))?;
            let key = match key {
                Some(k) => escape::unescape_key(k).map_err(|e| format!("in the key: {e}"))?,
                None => None,
            };
            let msg = Message::new(value);
            match key {
                Some(k) => msg.with_key(k),
                None => msg,
            }
        } else {
            let msg = Message::new(value.to_owned());
            match key {
                Some(k) => msg.with_key(k.to_owned()),
                None => msg,
            }
        };
        let size = (BATCH_HEADER_LEN + record_size(&msg, 0, 0)) as u64;
        if size > self.max_message_bytes {
            return Err(format!(
                "a record of {} (as a batch of its own) exceeds the largest accepted, {}",
                human::bytes(size),
                human::bytes(self.max_message_bytes)
            ));
        }
        Ok(msg)
    }
}

/// How long the stdin loop waits for a line before it looks for a signal again.
const POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Lines read ahead of the appends: with [`max_line`] bytes at most each, the memory a
/// `produce` holds for its input stays bounded whatever stdin sends.
const LINES_AHEAD: usize = 16;

/// Bytes appended in one batch at most (besides [`BATCH`] records): a batch of large records
/// is flushed early.
pub(super) const BATCH_BYTES: usize = 8 << 20;

/// The longest line a record of `max_message_bytes` can come from: `--escaped` spells a byte
/// in at most 4 (`\xNN`), plus a key separator and the newline.
fn max_line(max_message_bytes: u64) -> u64 {
    max_message_bytes.saturating_mul(4).saturating_add(64)
}

/// Reads stdin lines (each with its `\n`, when it has one) on their own thread, so that a
/// signal stops a `produce` that waits for input (a terminal, an idle pipe) at once. A line
/// longer than `limit` bytes (no record can come from it) is an error as soon as `limit + 1`
/// bytes of it were read: a stream without newlines never fills the memory.
fn stdin_lines(limit: u64) -> Receiver<std::io::Result<Vec<u8>>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(LINES_AHEAD);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        loop {
            let mut raw = Vec::new();
            match (&mut input)
                .take(limit.saturating_add(1))
                .read_until(b'\n', &mut raw)
            {
                Ok(0) => break,
                Ok(n) if n as u64 > limit => {
                    let _ = tx.send(Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "a line is longer than {}: no record can come from it",
                            human::bytes(limit)
                        ),
                    )));
                    break;
                }
                Ok(_) => {
                    if tx.send(Ok(raw)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    break;
                }
            }
        }
    });
    rx
}

/// What the next read of stdin gave.
enum Input {
    /// A line, without its `\n`.
    Line(Vec<u8>),
    /// The end of the input.
    End,
    /// A signal came first.
    Interrupted,
}

/// A line read ahead by [`input_paused`], handed out by the next [`next_line`].
type Stash = Option<std::io::Result<Vec<u8>>>;

/// How long stdin may give no line before what was read so far is appended: a pipe being
/// written in bulk gives its next line far sooner.
const PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

/// Whether stdin gave no line for [`PAUSE`] (its writer paused): what was read so far is
/// appended then, without waiting for a full batch, so that a slow stream's records are
/// appended (and acknowledged) as they come. A line that came is kept in `stash`.
fn input_paused(lines: &Receiver<std::io::Result<Vec<u8>>>, stash: &mut Stash) -> bool {
    if stash.is_some() {
        return false;
    }
    match lines.recv_timeout(PAUSE) {
        Ok(item) => {
            *stash = Some(item);
            false
        }
        Err(RecvTimeoutError::Timeout) => true,
        // The end: the caller appends what it holds when it reads it.
        Err(RecvTimeoutError::Disconnected) => false,
    }
}

/// The next line of `lines` (`line_no` lines were read before it), the stashed one first.
fn next_line(
    lines: &Receiver<std::io::Result<Vec<u8>>>,
    stash: &mut Stash,
    line_no: u64,
) -> Result<Input, Stop> {
    loop {
        if interrupt::requested() {
            return Ok(Input::Interrupted);
        }
        let received = match stash.take() {
            Some(item) => Ok(item),
            None => lines.recv_timeout(POLL),
        };
        match received {
            Ok(Ok(mut raw)) => {
                // Split at `\n` only: a `\r` before it belongs to the value.
                if raw.last() == Some(&b'\n') {
                    raw.pop();
                }
                return Ok(Input::Line(raw));
            }
            Ok(Err(e)) => {
                return Err(Stop::Failed {
                    what: format!("cannot read stdin: {e}"),
                    at: Some(line_no.saturating_add(1)),
                });
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(Input::End),
        }
    }
}

/// Appends stdin's lines in batches. At a bad line, a failed read of stdin or a signal, the
/// lines before it (all valid) are appended first, then the command stops.
pub fn read_stdin(appender: &mut Appender<'_>, format: &LineFormat<'_>) -> Result<(), Stop> {
    let lines = stdin_lines(max_line(format.max_message_bytes));
    let mut batch: Vec<Message> = Vec::with_capacity(BATCH);
    let mut batch_bytes = 0usize;
    let mut line_no = 0u64;
    let mut stash: Stash = None;
    let stop = loop {
        match next_line(&lines, &mut stash, line_no) {
            Ok(Input::Line(raw)) => {
                line_no = line_no.saturating_add(1);
                match format.message(&raw) {
                    Ok(msg) => {
                        batch_bytes = batch_bytes.saturating_add(msg.encoded_len());
                        batch.push(msg);
                    }
                    Err(what) => {
                        break Stop::Invalid {
                            line: line_no,
                            what,
                        };
                    }
                }
                if batch.len() == BATCH
                    || batch_bytes >= BATCH_BYTES
                    || input_paused(&lines, &mut stash)
                {
                    appender.flush(&mut batch)?;
                    batch_bytes = 0;
                }
            }
            Ok(Input::End) => return appender.flush(&mut batch),
            Ok(Input::Interrupted) => break Stop::Interrupted,
            Err(stop) => break stop,
        }
    };
    // Every line before the stop is whole and valid: append them, then stop.
    appender.flush(&mut batch)?;
    Err(stop)
}

/// `--all-or-nothing`: reads and checks every line of stdin, keeping them in a temporary file,
/// and appends nothing when one is bad, stdin fails or a signal comes; then appends them all.
pub fn read_all_or_nothing(
    appender: &mut Appender<'_>,
    format: &LineFormat<'_>,
) -> Result<(), Stop> {
    let spool_error = |e: std::io::Error, at: Option<u64>| Stop::Failed {
        what: format!(
            "cannot keep the input in a temporary file (under TMPDIR, {}) for --all-or-nothing: {e}",
            std::env::temp_dir().display()
        ),
        at,
    };
    let mut spool = tempfile::tempfile().map_err(|e| spool_error(e, None))?;
    let lines = stdin_lines(max_line(format.max_message_bytes));
    let mut line_no = 0u64;
    let mut stash: Stash = None;
    {
        let mut copy = BufWriter::new(&mut spool);
        loop {
            match next_line(&lines, &mut stash, line_no)? {
                Input::Line(raw) => {
                    line_no = line_no.saturating_add(1);
                    format.message(&raw).map_err(|what| Stop::Invalid {
                        line: line_no,
                        what,
                    })?;
                    copy.write_all(&raw)
                        .and_then(|()| copy.write_all(b"\n"))
                        .map_err(|e| spool_error(e, Some(line_no)))?;
                }
                Input::End => break,
                Input::Interrupted => return Err(Stop::Interrupted),
            }
        }
        copy.flush().map_err(|e| spool_error(e, None))?;
    }
    spool.rewind().map_err(|e| spool_error(e, None))?;
    // Every line is valid: append them all.
    let mut batch: Vec<Message> = Vec::with_capacity(BATCH);
    let mut batch_bytes = 0usize;
    for (i, raw) in (1u64..).zip(BufReader::new(spool).split(b'\n')) {
        if interrupt::requested() {
            appender.flush(&mut batch)?;
            return Err(Stop::Interrupted);
        }
        let raw = raw.map_err(|e| spool_error(e, Some(i)))?;
        let msg = format.message(&raw).map_err(|what| Stop::Failed {
            what: format!("the temporary copy of the input changed: {what}"),
            at: Some(i),
        })?;
        batch_bytes = batch_bytes.saturating_add(msg.encoded_len());
        batch.push(msg);
        if batch.len() == BATCH || batch_bytes >= BATCH_BYTES {
            appender.flush(&mut batch)?;
            batch_bytes = 0;
        }
    }
    appender.flush(&mut batch)
}
