-- A small shop: the database every task of skyrl_sql.srpo asks about (read-only at run time).
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL NOT NULL);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    product_id INTEGER NOT NULL REFERENCES products(id),
    quantity INTEGER NOT NULL
);
INSERT INTO customers VALUES (1, 'Ada', 'London'), (2, 'Grace', 'New York'), (3, 'Alan', 'London'),
    (4, 'Edsger', 'Austin'), (5, 'Barbara', 'New York');
INSERT INTO products VALUES (1, 'pen', 1.5), (2, 'notebook', 4.0), (3, 'lamp', 25.0), (4, 'chair', 80.0);
INSERT INTO orders VALUES (1, 1, 1, 10), (2, 1, 3, 1), (3, 2, 2, 3), (4, 3, 4, 2), (5, 4, 1, 4),
    (6, 5, 2, 1), (7, 5, 3, 2), (8, 2, 4, 1);
