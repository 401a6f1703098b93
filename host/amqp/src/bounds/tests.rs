#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use serde_amqp::primitives::{Array, OrderedMap, Symbol};
use serde_amqp::value::Value;

use super::*;

fn encoded(value: &Value) -> Vec<u8> {
    serde_amqp::to_vec(value).unwrap()
}

fn described(value: Value) -> Value {
    Value::Described(Box::new(Described {
        descriptor: Descriptor::Code(0x77),
        value,
    }))
}

/// `levels` described values, one inside the other, around a null.
fn nested(levels: usize) -> Vec<u8> {
    // Built as bytes: serde_amqp's own encoder recurses as its decoder does.
    let mut bytes = Vec::new();
    for _ in 0..levels {
        bytes.extend_from_slice(&[0x00, 0x53, 0x77]);
    }
    bytes.push(0x40);
    bytes
}

/// How deep the scanner counts `value`: a compound, array or described
/// value is a level (the generator below makes no empty lists or maps,
/// whose encodings vary).
fn depth(value: &Value) -> usize {
    match value {
        Value::Described(d) => 1 + depth(&d.value),
        Value::List(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Map(map) => {
            1 + map
                .iter()
                .map(|(k, v)| depth(k).max(depth(v)))
                .max()
                .unwrap_or(0)
        }
        // An empty array is written without a constructor, and opens nothing.
        Value::Array(array) if array.0.is_empty() => 0,
        Value::Array(array) => 1 + array.0.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[test]
fn deep_nesting_is_refused_at_the_limit_and_taken_below_it() {
    assert_eq!(check_values(&nested(MAX_DEPTH), MAX_DEPTH), Ok(()));
    assert_eq!(
        check_values(&nested(MAX_DEPTH + 1), MAX_DEPTH),
        Err(Refused::TooDeep { limit: MAX_DEPTH })
    );
    // The probe of issue 40: 5,000 levels in 15 KB, refused after 64.
    assert_eq!(
        check_values(&nested(5_000), MAX_DEPTH),
        Err(Refused::TooDeep { limit: MAX_DEPTH })
    );
    // Lists in lists count as described values do.
    let mut list = Value::Int(1);
    for _ in 0..MAX_DEPTH + 1 {
        list = Value::List(vec![list]);
    }
    assert!(matches!(
        check_values(&encoded(&list), MAX_DEPTH),
        Err(Refused::TooDeep { .. })
    ));
}

#[test]
fn a_performative_ends_where_its_value_does() {
    let performative = encoded(&described(Value::List(vec![
        Value::String("link".to_owned()),
        Value::Uint(7),
    ])));
    let mut frame = performative.clone();
    frame.extend_from_slice(b"\x00\x53\x75\xa0\x03abc");
    assert_eq!(first_value_end(&frame, MAX_DEPTH), Ok(performative.len()));
    assert!(matches!(
        first_value_end(&performative[..performative.len() - 1], MAX_DEPTH),
        Err(Refused::Overrun { .. })
    ));
}

#[test]
fn counts_beyond_the_bytes_and_overruns_are_refused() {
    // An array32 of 4 billion `true`s in a handful of bytes.
    let bomb = [0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x41];
    assert!(matches!(
        check_values(&bomb, MAX_DEPTH),
        Err(Refused::CountBeyondSize { .. })
    ));
    // A list8 claiming 200 items in 3 bytes.
    assert!(matches!(
        check_values(&[0xc0, 0x03, 200, 0x40, 0x40], MAX_DEPTH),
        Err(Refused::CountBeyondSize { .. })
    ));
    // A string inside a list that runs past the list's end.
    assert!(matches!(
        check_values(
            &[0xc0, 0x03, 0x01, 0xa1, 0x05, b'a', b'b', b'c', b'd', b'e'],
            MAX_DEPTH
        ),
        Err(Refused::Overrun { .. })
    ));
    assert!(matches!(
        check_values(&[0xff], MAX_DEPTH),
        Err(Refused::UnknownCode { code: 0xff, at: 0 })
    ));
}

#[test]
fn once_refused_a_scanner_stays_refused() {
    let mut scanner = Scanner::new(2);
    assert!(scanner.feed(&nested(3)).is_err());
    assert!(scanner.feed(&[0x40]).is_err());
}

#[test]
fn arrays_of_compounds_and_described_elements_are_read_through() {
    let lists = Value::Array(Array(vec![
        Value::List(vec![Value::Int(1), Value::String("a".to_owned())]),
        Value::List(vec![Value::Int(2)]),
    ]));
    let bytes = encoded(&lists);
    assert_eq!(check_values(&bytes, MAX_DEPTH), Ok(()));
    // Two levels: the array, and a list in it.
    assert!(check_values(&bytes, 1).is_err());
    assert_eq!(check_values(&bytes, 2), Ok(()));
    // An array of described smallulongs: 0xe0 size count 0x00 descriptor 0x53 elements.
    let described_elements = [0xe0, 0x07, 0x02, 0x00, 0x53, 0x77, 0x53, 0x01, 0x02];
    assert_eq!(check_values(&described_elements, MAX_DEPTH), Ok(()));
    assert!(check_values(&described_elements, 1).is_err());
    // An empty array as serde_amqp writes it: no element constructor.
    let empty = encoded(&Value::Array(Array(Vec::new())));
    assert_eq!(empty, [0xe0, 0x01, 0x00]);
    assert_eq!(check_values(&empty, MAX_DEPTH), Ok(()));
}

/// A value tree: primitives, and non-empty lists, maps, arrays and
/// described values around them.
fn value_tree() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u8>().prop_map(Value::Ubyte),
        any::<u32>().prop_map(Value::Uint),
        any::<i64>().prop_map(Value::Long),
        "[a-z]{0,300}".prop_map(Value::String),
        "[a-z]{1,8}".prop_map(|s| Value::Symbol(Symbol::from(s))),
        proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|b| Value::Binary(serde_bytes::ByteBuf::from(b))),
    ];
    leaf.prop_recursive(12, 96, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 1..6).prop_map(Value::List),
            proptest::collection::vec(("[a-z]{1,6}", inner.clone()), 1..5).prop_map(|entries| {
                let mut map = OrderedMap::new();
                for (key, value) in entries {
                    map.insert(Value::String(key), value);
                }
                Value::Map(map)
            }),
            proptest::collection::vec(any::<i32>(), 0..6)
                .prop_map(|items| Value::Array(Array(items.into_iter().map(Value::Int).collect()))),
            proptest::collection::vec(proptest::collection::vec(any::<u32>(), 1..4), 1..4)
                .prop_map(|lists| Value::Array(Array(
                    lists
                        .into_iter()
                        .map(|l| Value::List(l.into_iter().map(Value::Uint).collect()))
                        .collect()
                ))),
            inner.prop_map(described),
        ]
    })
}

proptest! {
    /// Whatever the value and however its bytes are cut into pieces, the
    /// scanner reads it whole, and refuses it exactly when it nests beyond
    /// the limit.
    #[test]
    fn values_are_read_whole_in_any_pieces_and_refused_only_when_too_deep(
        values in proptest::collection::vec(value_tree(), 1..4),
        limit in 1usize..10,
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut bytes = Vec::new();
        for value in &values {
            bytes.extend(encoded(value));
        }
        let deepest = values.iter().map(depth).max().unwrap_or(0);
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.sort_unstable();
        let mut scanner = Scanner::new(limit);
        let mut start = 0;
        let mut result = Ok(());
        for cut in at.into_iter().chain([bytes.len()]) {
            result = result.and_then(|()| scanner.feed(&bytes[start..cut]));
            start = cut;
        }
        if deepest <= limit {
            prop_assert_eq!(result, Ok(()));
            prop_assert!(scanner.at_boundary());
            prop_assert_eq!(scanner.values(), values.len() as u64);
        } else {
            prop_assert_eq!(result, Err(Refused::TooDeep { limit }));
        }
    }

    /// Whatever the bytes, the scanner neither panics nor takes what the
    /// library then decodes deeper than the limit: what it takes decodes
    /// (or fails to) on a thread with a small stack.
    #[test]
    fn arbitrary_bytes_never_get_past_the_scanner_too_deep(
        bytes in proptest::collection::vec(
            prop_oneof![
                Just(0x00u8), Just(0x53), Just(0xc0), Just(0xd0), Just(0xe0),
                Just(0x45), Just(0x40), Just(0xa1), any::<u8>()
            ],
            0..2_000,
        ),
    ) {
        if check_values(&bytes, MAX_DEPTH).is_ok() {
            let decode = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let _ = serde_amqp::from_slice::<Value>(&bytes);
                })
                .unwrap();
            prop_assert!(decode.join().is_ok());
        }
    }
}
