//! The policies compared on one trace and one cost model.

pub mod driver;
pub mod oracle;
pub mod prescient;

pub use driver::Driver;
pub use oracle::Oracle;
pub use prescient::Prescient;
