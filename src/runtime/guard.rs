//! The second line of defence around foreign calls: the bindings panic when a symbol
//! cannot be resolved, and a panic must end as a finding, not as a dead agent.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `call`, turning a panic into its message.
pub(crate) fn catch<T>(call: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(call)).map_err(|payload| panic_message(payload.as_ref()))
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panic with a non-text payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_value_when_nothing_panics() {
        assert_eq!(catch(|| 7), Ok(7));
    }

    #[test]
    fn turns_a_formatted_panic_into_its_message() {
        let symbol = "cuInit";
        let caught = catch(|| -> u32 { panic!("Missing symbol {symbol}") });
        assert_eq!(caught, Err("Missing symbol cuInit".to_string()));
    }

    #[test]
    fn turns_a_static_panic_into_its_message() {
        let caught = catch(|| -> u32 { panic!("static message") });
        assert_eq!(caught, Err("static message".to_string()));
    }
}
