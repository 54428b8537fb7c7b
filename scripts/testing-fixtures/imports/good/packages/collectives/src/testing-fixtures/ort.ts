// a fixture may use a devDependency the graph forbids
import "@ulysses/kernels";
