//! Stand-in for operating systems other than Linux: the API exists, and
//! attaching fails with [`EbpfError::Unsupported`].

use std::time::Duration;

use wakemeter::{KernelSample, KernelSourceError};

use crate::{AttachKind, EbpfError, EbpfSourceBuilder, MapUsage, ProgramRunStats, SyscallHook};

/// Never constructed: attaching always fails here.
#[derive(Debug)]
pub(crate) enum Session {}

impl Session {
    pub(crate) fn attach(_options: &EbpfSourceBuilder) -> Result<Session, EbpfError> {
        Err(EbpfError::Unsupported)
    }

    pub(crate) fn pid(&self) -> u32 {
        match *self {}
    }

    pub(crate) fn attach_duration(&self) -> Duration {
        match *self {}
    }

    pub(crate) fn attach_kind(&self) -> AttachKind {
        match *self {}
    }

    pub(crate) fn loaded_programs(&self) -> bool {
        match *self {}
    }

    pub(crate) fn load_duration(&self) -> Option<Duration> {
        match *self {}
    }

    pub(crate) fn watched_processes(&self) -> usize {
        match *self {}
    }

    pub(crate) fn syscall_hook(&self) -> SyscallHook {
        match *self {}
    }

    pub(crate) fn max_threads(&self) -> u32 {
        match *self {}
    }

    pub(crate) fn map_usage(&mut self) -> Result<MapUsage, KernelSourceError> {
        match *self {}
    }

    pub(crate) fn program_stats(&self) -> Result<Vec<ProgramRunStats>, EbpfError> {
        match *self {}
    }

    pub(crate) fn quiet_threads(&self) -> &[u64] {
        match *self {}
    }

    pub(crate) fn recycle(&mut self, _sample: KernelSample) {
        match *self {}
    }

    pub(crate) fn read(&mut self) -> Result<KernelSample, KernelSourceError> {
        match *self {}
    }
}

/// Never constructed: run statistics exist only on Linux.
#[derive(Debug)]
pub(crate) enum RunStats {}

impl RunStats {
    pub(crate) fn enable() -> Result<RunStats, EbpfError> {
        Err(EbpfError::Unsupported)
    }
}

/// Stand-in for the stack programs: attaching fails here.
pub(crate) mod stacks {
    use std::time::Duration;

    use crate::EbpfError;
    use crate::stacks::{StackCounts, StackKind, StackSessionBuilder};

    /// No per-thread events here.
    pub(crate) fn fd_budget() -> u32 {
        0
    }

    /// Never constructed: attaching always fails here.
    #[derive(Debug)]
    pub(crate) enum StackSession {}

    impl StackSession {
        pub(crate) fn attach(_options: &StackSessionBuilder) -> Result<StackSession, EbpfError> {
            Err(EbpfError::Unsupported)
        }

        pub(crate) fn pid(&self) -> u32 {
            match *self {}
        }

        pub(crate) fn kind(&self) -> StackKind {
            match *self {}
        }

        pub(crate) fn attach_duration(&self) -> Duration {
            match *self {}
        }

        pub(crate) fn leaf_rows(&self) -> u32 {
            match *self {}
        }

        pub(crate) fn leaf_table_bytes(&self) -> u64 {
            match *self {}
        }

        pub(crate) fn refresh_modules(&mut self) -> Result<bool, EbpfError> {
            match *self {}
        }

        pub(crate) fn target_exited(&self) -> bool {
            match *self {}
        }

        pub(crate) fn stop(&mut self) {
            match *self {}
        }

        pub(crate) fn read(&mut self) -> Result<StackCounts, EbpfError> {
            match *self {}
        }
    }
}
