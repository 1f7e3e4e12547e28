"""How a key is answered: the resolver contract, the ledger that draws once per unit, its single-flight gate, replay."""
