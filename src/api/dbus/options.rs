//! Suite options between their D-Bus form (`a{sv}`) and the JSON the suites take.

use std::collections::HashMap;

use serde_json::{Map, Number, Value};
use zbus::{OwnedVariant, Variant};

use crate::echo::quoted;

/// Converts `Start`'s `a{sv}` options to JSON: any D-Bus integer or double becomes a
/// number, strings and booleans stay as they are. Anything else (arrays, structs,
/// object paths, file descriptors) is refused with a message naming the option.
pub fn options_from_dbus(
    options: HashMap<String, OwnedVariant>,
) -> Result<Map<String, Value>, String> {
    let mut map = Map::new();
    for (key, value) in options {
        if let Some(n) = non_finite(&value) {
            return Err(format!(
                "option {} is {n}, which is not a number a suite can take; send a finite number",
                quoted(&key)
            ));
        }
        let json = variant_to_json(&value).ok_or_else(|| {
            format!(
                "option {} has D-Bus type {}; options must be numbers, strings or booleans",
                quoted(&key),
                value.value_signature()
            )
        })?;
        map.insert(key, json);
    }
    Ok(map)
}

/// A double that is NaN or infinite, however deeply wrapped in variants.
fn non_finite(value: &Variant<'_>) -> Option<f64> {
    match value {
        Variant::F64(n) if !n.is_finite() => Some(*n),
        Variant::Variant(inner) => non_finite(inner),
        _ => None,
    }
}

fn variant_to_json(value: &Variant<'_>) -> Option<Value> {
    Some(match value {
        Variant::U8(n) => Value::from(*n),
        Variant::Bool(b) => Value::Bool(*b),
        Variant::I16(n) => Value::from(*n),
        Variant::U16(n) => Value::from(*n),
        Variant::I32(n) => Value::from(*n),
        Variant::U32(n) => Value::from(*n),
        Variant::I64(n) => Value::from(*n),
        Variant::U64(n) => Value::from(*n),
        // NaN and infinities have no JSON form.
        Variant::F64(n) => Value::Number(Number::from_f64(*n)?),
        Variant::Str(s) => Value::String(s.as_str().to_string()),
        // A variant wrapped in another one (`v` inside `v`) means the inner value.
        Variant::Variant(inner) => return variant_to_json(inner),
        _ => return None,
    })
}

/// Converts one JSON option value to what `Start` sends: integers as `x` (or `t` when
/// too big), other numbers as `d`, strings as `s`, booleans as `b`. Arrays, objects
/// and null have no place in suite options.
pub fn json_to_variant(value: &Value) -> Option<Variant<'static>> {
    match value {
        Value::Bool(b) => Some(Variant::from(*b)),
        Value::String(s) => Some(Variant::from(s.clone())),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(Variant::from(i))
            } else if let Some(u) = n.as_u64() {
                Some(Variant::from(u))
            } else {
                n.as_f64().map(Variant::from)
            }
        }
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owned(v: Variant<'static>) -> OwnedVariant {
        OwnedVariant::try_from(v).unwrap()
    }

    #[test]
    fn numbers_of_every_width_strings_and_booleans_convert() {
        let mut options = HashMap::new();
        options.insert("y".to_string(), owned(Variant::from(7u8)));
        options.insert("n".to_string(), owned(Variant::from(-3i16)));
        options.insert("q".to_string(), owned(Variant::from(3u16)));
        options.insert("i".to_string(), owned(Variant::from(-5i32)));
        options.insert("u".to_string(), owned(Variant::from(512u32)));
        options.insert("x".to_string(), owned(Variant::from(-9i64)));
        options.insert("t".to_string(), owned(Variant::from(u64::MAX)));
        options.insert("d".to_string(), owned(Variant::from(0.25f64)));
        options.insert("s".to_string(), owned(Variant::from("abc")));
        options.insert("b".to_string(), owned(Variant::from(true)));
        let map = options_from_dbus(options).unwrap();
        assert_eq!(
            Value::Object(map),
            json!({"y": 7, "n": -3, "q": 3, "i": -5, "u": 512, "x": -9,
                   "t": u64::MAX, "d": 0.25, "s": "abc", "b": true})
        );
    }

    #[test]
    fn containers_and_non_finite_numbers_are_refused() {
        let mut options = HashMap::new();
        options.insert("sizes".to_string(), owned(Variant::from(vec![1u32, 2])));
        let err = options_from_dbus(options).unwrap_err();
        assert!(err.contains("\"sizes\"") && err.contains("au"), "{err}");

        let mut options = HashMap::new();
        options.insert("x".to_string(), owned(Variant::from(f64::NAN)));
        let err = options_from_dbus(options).unwrap_err();
        assert!(
            err.contains("is NaN") && err.contains("finite number"),
            "{err}"
        );
        assert!(!err.contains("type d"), "{err}");
    }

    #[test]
    fn json_values_map_to_variants_and_back() {
        for value in [
            json!(512),
            json!(-1),
            json!(u64::MAX),
            json!(0.5),
            json!("s"),
            json!(false),
        ] {
            let variant = json_to_variant(&value).unwrap();
            assert_eq!(variant_to_json(&variant), Some(value));
        }
        assert!(json_to_variant(&json!([1])).is_none());
        assert!(json_to_variant(&json!(null)).is_none());
        assert!(json_to_variant(&json!({"a": 1})).is_none());
    }
}
