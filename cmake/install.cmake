# Installation (filled in with the find_package config and pkg-config file).
