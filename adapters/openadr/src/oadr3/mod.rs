//! OpenADR 3.x (in progress)
