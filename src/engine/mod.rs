pub mod mllog;
