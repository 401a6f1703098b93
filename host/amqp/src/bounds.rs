//! A bound on the AMQP values a peer sends, checked before any recursive
//! decoder sees them (issue 40).
//!
//! `serde_amqp` (and fe2o3-amqp above it) decode a value by recursion, with
//! no limit on depth: one `open` whose properties hold a described value
//! nested 5,000 deep overflows a worker thread's stack and aborts the
//! process, before any token is asked for. No hook in the library bounds
//! it, so this module reads the encoding itself (AMQP 1.0 §1.6) without
//! recursion and without allocating per value: it steps over each value's
//! constructor and size, keeps one small frame per open compound, array or
//! described value, and refuses
//!
//! - nesting deeper than a limit ([`MAX_DEPTH`]: Service Bus's own
//!   performatives and messages reach about 6);
//! - a format code AMQP does not define (the decoder would refuse it too,
//!   but only once it got there);
//! - a compound or array that claims more items than it has bytes, or an
//!   item that runs past the end of the compound holding it: each item
//!   takes at least a byte, so the decoder's work stays proportional to the
//!   bytes received (an array of four billion zero-width elements fits in
//!   ten bytes otherwise).
//!
//! It reads a stream fed in pieces ([`Scanner::feed`]), as a message's
//! sections arrive over the frames of one transfer, or one whole value
//! ([`first_value_end`]), as a frame's performative. It only reads: what it
//! passes is decoded, as before, by the library.

use thiserror::Error;

/// How deep values may nest: compounds (lists, maps), arrays and described
/// values each count one level.
pub const MAX_DEPTH: usize = 64;

/// Why a peer's bytes are refused before they are decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refused {
    /// Values nested beyond the limit.
    #[error("a value nested more than {limit} levels deep")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// A byte where a constructor should be that names no AMQP type.
    #[error("0x{code:02x} at byte {at} is not an AMQP format code")]
    UnknownCode {
        /// The byte.
        code: u8,
        /// Its offset from the start of what was scanned.
        at: u64,
    },
    /// A compound or array claiming more items than its bytes can hold.
    #[error("a compound of {size} bytes claims {count} items")]
    CountBeyondSize {
        /// The items claimed.
        count: u32,
        /// The bytes it has for them.
        size: u32,
    },
    /// A value that runs past the end of the compound or array holding it.
    #[error("a value at byte {at} runs past the end of the compound holding it")]
    Overrun {
        /// Where the value starts.
        at: u64,
    },
    /// A frame that is not one, or a performative that does not decode.
    #[error("{0}")]
    Malformed(String),
}

/// What is open around the next byte.
#[derive(Debug, Clone, Copy)]
enum Open {
    /// A list or map whose items end at byte `end`.
    Compound { end: u64 },
    /// An array with `remaining` elements still to come, each the body of
    /// format code `element`, ending at byte `end`.
    Array {
        end: u64,
        remaining: u32,
        element: u8,
    },
    /// A described value: its descriptor and then its value (`remaining`
    /// is 2, then 1).
    Described { remaining: u8 },
    /// An array's element constructor that is described: its descriptor,
    /// after which the element's own format code follows.
    ElementDescriptor,
}

/// What the scanner reads next.
#[derive(Debug, Clone, Copy)]
enum Next {
    /// A constructor (format code), or an array's next element.
    Item,
    /// The header of a value of format code `code` (sizes and counts):
    /// `need` bytes in all, of which `have` are in `Scanner::header`.
    Header { code: u8, need: u8 },
    /// An array's element format code (after its count, or after an
    /// element descriptor).
    ElementCode,
    /// Bytes of a primitive's data still to step over.
    Skip { remaining: u64 },
}

/// Reads AMQP values from a stream without decoding them, refusing what
/// [`Refused`] lists.
#[derive(Debug)]
pub struct Scanner {
    limit: usize,
    open: Vec<Open>,
    next: Next,
    /// Bytes of a header read so far (at most 8: a size and a count).
    header: [u8; 8],
    have: u8,
    /// Bytes read in all.
    at: u64,
    /// Whole values read at the top level.
    values: u64,
    refused: Option<Refused>,
}

impl Scanner {
    /// A scanner refusing values nested beyond `limit`.
    pub fn new(limit: usize) -> Scanner {
        Scanner {
            limit,
            open: Vec::new(),
            next: Next::Item,
            header: [0; 8],
            have: 0,
            at: 0,
            values: 0,
            refused: None,
        }
    }

    /// Whether the bytes fed so far end between top-level values (not in
    /// the middle of one).
    pub fn at_boundary(&self) -> bool {
        self.open.is_empty() && matches!(self.next, Next::Item) && self.have == 0
    }

    /// How many whole values were read at the top level.
    pub fn values(&self) -> u64 {
        self.values
    }

    /// Reads `input`, the next bytes of the stream.
    ///
    /// # Errors
    ///
    /// What the bytes break; once refused, every later call answers the
    /// same.
    pub fn feed(&mut self, input: &[u8]) -> Result<(), Refused> {
        self.read(input, u64::MAX).map(drop)
    }

    /// Reads `input` until `values` top-level values have been read, and
    /// answers how many bytes of `input` that took (all of it if fewer
    /// values end in it).
    fn read(&mut self, input: &[u8], values: u64) -> Result<usize, Refused> {
        if let Some(refused) = &self.refused {
            return Err(refused.clone());
        }
        let result = self.step_all(input, values);
        if let Err(refused) = &result {
            self.refused = Some(refused.clone());
        }
        result
    }

    fn step_all(&mut self, input: &[u8], values: u64) -> Result<usize, Refused> {
        let mut used = 0;
        while self.values < values {
            let rest = &input[used..];
            match self.next {
                Next::Skip { remaining } => {
                    let take = remaining.min(rest.len() as u64);
                    used += usize::try_from(take).unwrap_or(rest.len());
                    self.at += take;
                    if take < remaining {
                        self.next = Next::Skip {
                            remaining: remaining - take,
                        };
                        return Ok(used);
                    }
                    self.next = Next::Item;
                    self.value_done()?;
                }
                Next::Item => {
                    if let Some(Open::Array {
                        remaining, element, ..
                    }) = self.open.last().copied()
                        && remaining > 0
                    {
                        // An element: its array's format code, no
                        // constructor of its own.
                        self.begin_body(element)?;
                        continue;
                    }
                    let Some(&code) = rest.first() else {
                        return Ok(used);
                    };
                    used += 1;
                    self.at += 1;
                    if code == 0x00 {
                        self.push(Open::Described { remaining: 2 })?;
                    } else {
                        self.begin_body(code)?;
                    }
                }
                Next::ElementCode => {
                    let Some(&code) = rest.first() else {
                        return Ok(used);
                    };
                    used += 1;
                    self.at += 1;
                    if code == 0x00 {
                        self.push(Open::ElementDescriptor)?;
                        self.next = Next::Item;
                        continue;
                    }
                    if header_width(code).is_none() {
                        return Err(Refused::UnknownCode {
                            code,
                            at: self.at - 1,
                        });
                    }
                    self.set_element(code)?;
                }
                Next::Header { code, need } => {
                    let want = usize::from(need - self.have);
                    let take = want.min(rest.len());
                    let start = usize::from(self.have);
                    self.header[start..start + take].copy_from_slice(&rest[..take]);
                    self.have += u8::try_from(take).unwrap_or(0);
                    used += take;
                    self.at += take as u64;
                    if take < want {
                        return Ok(used);
                    }
                    self.have = 0;
                    self.end_header(code, need)?;
                }
            }
        }
        Ok(used)
    }

    /// Starts a value of format code `code`, its constructor read.
    fn begin_body(&mut self, code: u8) -> Result<(), Refused> {
        let start = self.at;
        match header_width(code) {
            None => Err(Refused::UnknownCode {
                code,
                at: start.saturating_sub(1),
            }),
            Some(Width::Fixed(0)) => {
                self.next = Next::Item;
                self.element_started();
                self.value_done()
            }
            Some(Width::Fixed(bytes)) => {
                self.within(start, u64::from(bytes))?;
                self.element_started();
                self.next = Next::Skip {
                    remaining: u64::from(bytes),
                };
                Ok(())
            }
            Some(Width::Sized(need)) => {
                self.element_started();
                self.next = Next::Header { code, need };
                Ok(())
            }
        }
    }

    /// A value's header is read (in `self.header`): its size, and its
    /// count for a compound or array.
    fn end_header(&mut self, code: u8, need: u8) -> Result<(), Refused> {
        let wide = need >= 4;
        let word = |i: usize| -> u32 {
            if wide {
                u32::from_be_bytes([
                    self.header[i * 4],
                    self.header[i * 4 + 1],
                    self.header[i * 4 + 2],
                    self.header[i * 4 + 3],
                ])
            } else {
                u32::from(self.header[i])
            }
        };
        let size = word(0);
        let header_start = self.at - u64::from(need);
        match code >> 4 {
            // Binary, string, symbol: `size` bytes follow.
            0xa | 0xb => {
                self.within(header_start, u64::from(need) + u64::from(size))?;
                self.next = Next::Skip {
                    remaining: u64::from(size),
                };
                if size == 0 {
                    self.next = Next::Item;
                    return self.value_done();
                }
                Ok(())
            }
            // List, map: `size` bytes from the count on.
            0xc | 0xd => {
                let count = word(1);
                let width = u32::from(need / 2);
                let Some(items) = size.checked_sub(width) else {
                    return Err(Refused::CountBeyondSize { count, size: 0 });
                };
                if count > items {
                    return Err(Refused::CountBeyondSize { count, size: items });
                }
                self.within(header_start, u64::from(need / 2) + u64::from(size))?;
                let end = self.at + u64::from(items);
                self.push(Open::Compound { end })?;
                self.next = Next::Item;
                self.close_finished()
            }
            // Array: `size` bytes from the count on, the element
            // constructor first.
            0xe | 0xf => {
                let count = word(1);
                let width = u32::from(need / 2);
                let Some(items) = size.checked_sub(width) else {
                    return Err(Refused::CountBeyondSize { count, size: 0 });
                };
                // The element constructor takes a byte, each element at
                // least a byte (or none, for a zero-width type; those are
                // held to one per byte of the array too).
                if count > items {
                    return Err(Refused::CountBeyondSize { count, size: items });
                }
                self.within(header_start, u64::from(need / 2) + u64::from(size))?;
                if count == 0 && items == 0 {
                    // An empty array with no element constructor, as
                    // serde_amqp writes one (`e0 01 00`).
                    self.next = Next::Item;
                    return self.value_done();
                }
                let end = self.at + u64::from(items);
                self.push(Open::Array {
                    end,
                    remaining: count,
                    element: 0x40,
                })?;
                self.next = Next::ElementCode;
                Ok(())
            }
            _ => Err(Refused::UnknownCode {
                code,
                at: header_start.saturating_sub(1),
            }),
        }
    }

    /// The element format code of the innermost array is `code`.
    fn set_element(&mut self, code: u8) -> Result<(), Refused> {
        if let Some(Open::Array { element, .. }) = self.open.last_mut() {
            *element = code;
        }
        self.next = Next::Item;
        self.close_finished()
    }

    /// An array's element begins: one fewer to come.
    fn element_started(&mut self) {
        if let Some(Open::Array { remaining, .. }) = self.open.last_mut()
            && matches!(self.next, Next::Item)
            && *remaining > 0
        {
            *remaining -= 1;
        }
    }

    fn push(&mut self, open: Open) -> Result<(), Refused> {
        if self.open.len() >= self.limit {
            return Err(Refused::TooDeep { limit: self.limit });
        }
        self.open.push(open);
        Ok(())
    }

    /// Checks that `len` bytes from `start` end within the innermost
    /// compound or array.
    fn within(&self, start: u64, len: u64) -> Result<(), Refused> {
        let end = self.open.iter().rev().find_map(|open| match open {
            Open::Compound { end } | Open::Array { end, .. } => Some(*end),
            _ => None,
        });
        match end {
            Some(end) if start.saturating_add(len) > end => Err(Refused::Overrun { at: start }),
            _ => Ok(()),
        }
    }

    /// A value has been read whole: it counts toward what holds it, and
    /// whatever it completes closes in turn.
    fn value_done(&mut self) -> Result<(), Refused> {
        match self.open.last_mut() {
            None => {
                self.values += 1;
                Ok(())
            }
            Some(Open::Described { remaining }) => {
                *remaining -= 1;
                if *remaining == 0 {
                    self.open.pop();
                    return self.value_done();
                }
                Ok(())
            }
            Some(Open::ElementDescriptor) => {
                self.open.pop();
                self.next = Next::ElementCode;
                Ok(())
            }
            Some(Open::Compound { .. } | Open::Array { .. }) => self.close_finished(),
        }
    }

    /// Closes the innermost compound or array if its bytes are all read.
    fn close_finished(&mut self) -> Result<(), Refused> {
        match self.open.last().copied() {
            Some(Open::Compound { end }) if self.at >= end => {
                if self.at > end {
                    return Err(Refused::Overrun { at: self.at });
                }
                self.open.pop();
                self.value_done()
            }
            Some(Open::Array { end, remaining, .. })
                if remaining == 0 && matches!(self.next, Next::Item) =>
            {
                if self.at != end {
                    // Fewer bytes than its size says, or more.
                    return Err(Refused::Overrun { at: self.at });
                }
                self.open.pop();
                self.value_done()
            }
            Some(Open::Array { end, .. }) if self.at >= end && matches!(self.next, Next::Item) => {
                // Elements still to come, and no bytes left for them.
                Err(Refused::Overrun { at: self.at })
            }
            _ => Ok(()),
        }
    }
}

/// How a format code's value is laid out after the code.
enum Width {
    /// This many bytes of data.
    Fixed(u8),
    /// A header of this many bytes (size, and count for compounds and
    /// arrays), then what the size says.
    Sized(u8),
}

/// The layout of `code`, or `None` when AMQP defines no such type (§1.6).
fn header_width(code: u8) -> Option<Width> {
    Some(match code {
        0x40..=0x45 => Width::Fixed(0),
        0x50..=0x56 => Width::Fixed(1),
        0x60 | 0x61 => Width::Fixed(2),
        0x70..=0x74 => Width::Fixed(4),
        0x80..=0x84 => Width::Fixed(8),
        0x94 | 0x98 => Width::Fixed(16),
        0xa0 | 0xa1 | 0xa3 => Width::Sized(1),
        0xb0 | 0xb1 | 0xb3 => Width::Sized(4),
        0xc0 | 0xc1 | 0xe0 => Width::Sized(2),
        0xd0 | 0xd1 | 0xf0 => Width::Sized(8),
        _ => return None,
    })
}

/// Where the first whole value in `bytes` ends (a frame's performative:
/// what follows is a transfer's payload), checked as [`Scanner`] checks.
///
/// # Errors
///
/// What the value breaks, or [`Refused::Overrun`] when `bytes` ends inside
/// it.
pub fn first_value_end(bytes: &[u8], limit: usize) -> Result<usize, Refused> {
    let mut scanner = Scanner::new(limit);
    let used = scanner.read(bytes, 1)?;
    if scanner.values() == 1 {
        Ok(used)
    } else {
        Err(Refused::Overrun { at: 0 })
    }
}

/// Checks that `bytes` is a sequence of whole values (a message, or a
/// message inside a batch or a `$management` body).
///
/// # Errors
///
/// What a value breaks, or [`Refused::Overrun`] when `bytes` ends inside
/// one.
pub fn check_values(bytes: &[u8], limit: usize) -> Result<(), Refused> {
    let mut scanner = Scanner::new(limit);
    scanner.feed(bytes)?;
    if scanner.at_boundary() {
        Ok(())
    } else {
        Err(Refused::Overrun {
            at: bytes.len() as u64,
        })
    }
}

#[cfg(test)]
mod tests;
