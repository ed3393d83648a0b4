//! The subscription trie and the retained-message topic tree.
