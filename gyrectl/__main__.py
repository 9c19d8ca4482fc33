from gyrectl.cli.app import main

main()
