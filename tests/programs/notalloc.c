/* A shared library that exports no malloc/free: not an allocator. */
int not_an_allocator(int x) { return x + 1; }
