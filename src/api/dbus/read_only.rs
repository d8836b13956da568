//! Every property of the agent is read-only. The object server would answer a `Set`
//! of one with `UnknownProperty`, as if it did not exist; this wrapper answers
//! `PropertyReadOnly` naming it, and `UnknownProperty` only for a name that is not a
//! property, quoted within bounds.

use std::collections::HashMap;
use std::fmt::Write;

use async_trait::async_trait;
use zbus::message::{Header, Message};
use zbus::names::{InterfaceName, MemberName};
use zbus::object_server::{DispatchResult, Interface, SignalEmitter};
use zbus::{fdo, BoxDBusError, Connection, ObjectServer, OwnedVariant, Variant};

use crate::echo::quoted;

/// An interface whose properties can be read and never written.
pub struct ReadOnly<I> {
    pub inner: I,
    properties: &'static [&'static str],
}

impl<I> ReadOnly<I> {
    pub fn new(inner: I, properties: &'static [&'static str]) -> Self {
        ReadOnly { inner, properties }
    }

    fn refusal(&self, property: &str) -> BoxDBusError {
        let interface = self.properties.join(", ");
        if self.properties.contains(&property) {
            fdo::Error::PropertyReadOnly(format!(
                "property {property} is read-only; the agent's properties ({interface}) change \
                 only as its runs do"
            ))
            .into()
        } else {
            fdo::Error::UnknownProperty(format!(
                "no property {}; the properties are {interface}",
                quoted(property)
            ))
            .into()
        }
    }
}

#[async_trait]
impl<I: Interface> Interface for ReadOnly<I> {
    fn name() -> InterfaceName<'static> {
        I::name()
    }

    fn spawn_tasks_for_methods(&self) -> bool {
        self.inner.spawn_tasks_for_methods()
    }

    async fn get(
        &self,
        property_name: &str,
        server: &ObjectServer,
        connection: &Connection,
        header: Option<&Header<'_>>,
        emitter: &SignalEmitter<'_>,
    ) -> Option<Result<OwnedVariant, BoxDBusError>> {
        self.inner
            .get(property_name, server, connection, header, emitter)
            .await
    }

    async fn get_all(
        &self,
        object_server: &ObjectServer,
        connection: &Connection,
        header: Option<&Header<'_>>,
        emitter: &SignalEmitter<'_>,
    ) -> fdo::Result<HashMap<String, OwnedVariant>> {
        self.inner
            .get_all(object_server, connection, header, emitter)
            .await
    }

    fn set<'call>(
        &'call self,
        property_name: &'call str,
        _value: &'call Variant<'_>,
        _object_server: &'call ObjectServer,
        _connection: &'call Connection,
        _header: Option<&'call Header<'_>>,
        _emitter: &'call SignalEmitter<'_>,
    ) -> DispatchResult<'call> {
        let refusal = self.refusal(property_name);
        DispatchResult::Async(Box::pin(async move { Err(refusal) }))
    }

    async fn set_mut(
        &mut self,
        property_name: &str,
        _value: &Variant<'_>,
        _object_server: &ObjectServer,
        _connection: &Connection,
        _header: Option<&Header<'_>>,
        _emitter: &SignalEmitter<'_>,
    ) -> Option<Result<(), BoxDBusError>> {
        Some(Err(self.refusal(property_name)))
    }

    fn call<'call>(
        &'call self,
        server: &'call ObjectServer,
        connection: &'call Connection,
        msg: &'call Message,
        name: MemberName<'call>,
    ) -> DispatchResult<'call> {
        self.inner.call(server, connection, msg, name)
    }

    fn call_mut<'call>(
        &'call mut self,
        server: &'call ObjectServer,
        connection: &'call Connection,
        msg: &'call Message,
        name: MemberName<'call>,
    ) -> DispatchResult<'call> {
        self.inner.call_mut(server, connection, msg, name)
    }

    fn introspect_to_writer(&self, writer: &mut dyn Write, level: usize) {
        self.inner.introspect_to_writer(writer, level)
    }
}
