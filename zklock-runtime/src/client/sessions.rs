//! The session a client hands out: opened on first use and again after an expiry, shared by
//! every caller, on the runtime the client's sessions run on; and whether the client may still
//! be used at all.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};
use zookeeper_client as zk;

use crate::client::LockClient;
use crate::connection::connect_string;
use crate::connection::driver::Driver;
use crate::connection::secure;
use crate::connection::session::{Health, Session, SessionStatus};
use crate::error::LockError;

impl LockClient {
    pub(crate) fn latest(&self) -> Option<Arc<Session>> {
        self.inner.latest.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The session new work should use, opening a new one if there is none or the last one
    /// ended. `bound` caps the wait (together with the configured connect timeout).
    pub(crate) async fn session(&self, bound: Option<Duration>) -> Result<Arc<Session>, LockError> {
        let config = &self.inner.config;
        let mut limit = config.connect_limit();
        if let Some(bound) = bound {
            limit = limit.min(bound);
        }
        let open = async {
            let mut current = self.inner.current.lock().await;
            if let Some(session) = current.as_ref().filter(|s| s.is_usable()) {
                return Ok(session.clone());
            }
            self.check_open()?;
            let session = self.open_session().await?;
            if let Err(closed) = self.check_open() {
                // Closed while this session was being opened: it is never handed out, and ends
                // here, as `close` ends the one it finds.
                let _ = tokio::time::timeout(config.connect_limit(), session.close_handle()).await;
                return Err(closed);
            }
            *current = Some(session.clone());
            *self.inner.latest.write().unwrap_or_else(|e| e.into_inner()) = Some(session.clone());
            self.inner.set_status(session.health().status);
            Ok(session)
        };
        // A misconfigured TLS connection fails every attempt the same way until the limit;
        // the diagnosis tells it early and says why. A session that opened wins every tie.
        tokio::select! {
            biased;
            result = open => result,
            why = secure::misconfiguration(&config.security, self.inner.contact.servers()) => Err(why),
            why = connect_string::all_refused(&config.connect, &self.inner.contact) => Err(why),
            () = tokio::time::sleep(limit) => Err(LockError::connection(format!(
                "no ZooKeeper session could be opened to {} within {limit:?}{}",
                config.connect,
                self.inner.contact.clause()
            ))),
        }
    }

    /// `Err(Closed)` once the client cannot be used any more: it was closed, or the runtime its
    /// sessions run on (its driver thread, or [`LockClientBuilder::runtime`](crate::client::builder::LockClientBuilder::runtime)) stopped under a
    /// session (which closes it for good).
    pub(crate) fn check_open(&self) -> Result<(), LockError> {
        // Read in place, without cloning the session's handle.
        let latest = self.inner.latest.read().unwrap_or_else(|e| e.into_inner());
        let runtime_gone = latest.as_ref().is_some_and(|s| s.runtime_gone());
        drop(latest);
        self.check_open_in(runtime_gone)
    }

    /// [`check_open`](Self::check_open) for an acquisition that already has a session at hand
    /// (a reentrant one, in its hold's session), which answers whether its runtime stopped:
    /// no lock taken.
    #[inline]
    pub(crate) fn check_open_in(&self, runtime_gone: bool) -> Result<(), LockError> {
        if runtime_gone {
            self.mark_closed("the runtime its ZooKeeper session ran on stopped; open a new client");
        }
        match self.inner.closed.get() {
            Some(reason) => Err(LockError::closed(reason.clone())),
            None => Ok(()),
        }
    }

    /// Closes the client for good (the first reason given is kept).
    pub(super) fn mark_closed(&self, reason: &str) {
        // The first reason given stays; a later one is dropped.
        let _ = self.inner.closed.set(reason.to_owned());
        self.inner.set_status(SessionStatus::Closed);
    }

    async fn open_session(&self) -> Result<Arc<Session>, LockError> {
        let config = &self.inner.config;
        self.inner.set_status(SessionStatus::Connecting);
        connect_string::resolve(&config.connect, self.inner.contact.servers()).await?;
        let driver = self
            .inner
            .driver
            .get_or_try_init(|| async {
                match &config.runtime {
                    Some(runtime) => Ok(Driver::on(runtime.clone())),
                    None => Driver::start().await,
                }
            })
            .await?
            .clone();
        debug!(connect = %config.connect, "opening zookeeper session");
        // On the driver: the client library's connection task is spawned where it connects.
        let client = self.clone();
        let connecting = driver.run(async move {
            // The session's monitor and pulse need the driver's timers, which the connect
            // itself does not: a caller's runtime built without them fails here, before a
            // session opens whose tasks would fail one by one.
            tokio::time::sleep(Duration::ZERO).await;
            let config = &client.inner.config;
            config.security.connect(client.connector(), &config.connect).await
        });
        let zk = connecting
            .await
            .map_err(|why| LockError::connection(format!("the runtime the client's sessions run on: {why}")))?
            .map_err(|e| match e {
                zk::Error::AuthFailed => config.security.auth_failed(),
                e @ zk::Error::BadArguments(_) => {
                    LockError::invalid_config_from(format!("connect string {:?}", config.connect), e)
                }
                e => LockError::connection_from(format!("cannot open a session to {}", config.connect), e),
            })?;
        config.security.check_authenticated(&zk).await?;
        let negotiated = zk.session_timeout();
        if negotiated < config.session_timeout && !self.inner.cut_reported.swap(true, Ordering::Relaxed) {
            warn!(
                asked = ?config.session_timeout,
                granted = ?negotiated,
                "the server granted a shorter session timeout than asked (servers allow 2 to 20 \
                 ticks): a dead holder blocks others for less, and loss is reported sooner"
            );
        }
        let loss_after = match config.loss_after {
            None => negotiated / 4,
            Some(asked) if asked > negotiated / 2 => {
                warn!(
                    asked = ?asked,
                    negotiated = ?negotiated,
                    using = ?(negotiated / 2),
                    "loss_after is too long for the session timeout the server granted: loss would be \
                     reported after the server may have expired the session; using half the session timeout"
                );
                negotiated / 2
            }
            Some(asked) => asked,
        };
        info!(
            session = format_args!("{:#x}", zk.session_id().0),
            timeout = ?negotiated,
            ?loss_after,
            "zookeeper session opened"
        );
        // Only the session new work goes to speaks for the client: a late word from an ended
        // session must not overwrite a newer session's status.
        let id = zk.session_id().0;
        let inner = Arc::downgrade(&self.inner);
        let on_change = Arc::new(move |health: Health| {
            let Some(inner) = inner.upgrade() else { return };
            let latest = inner
                .latest
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|s| s.id);
            if latest == Some(id) && inner.closed.get().is_none() {
                inner.set_status(health.status);
            }
        });
        Ok(Session::start(
            zk,
            driver,
            loss_after,
            config.fast_path_dirs,
            self.inner.contact.clone(),
            on_change,
        ))
    }

    /// A connector with this client's session timeout, credentials and TLS settings.
    fn connector(&self) -> zk::Connector {
        let config = &self.inner.config;
        let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
        for (scheme, auth) in &config.auth {
            connector = connector.with_auth(scheme, auth);
        }
        config.security.apply(connector)
    }
}
