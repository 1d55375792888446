"""Pure, vectorised model functions: numpy in, numpy out. No plotting, widgets or I/O."""
